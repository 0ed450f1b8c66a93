/*  keygen.c: p2pkv keygen, a CURVE keypair written as czmq certificates;
    and the reading of those certificates that lookup and get do for
    --curve-secret and --server-key.
*/
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>


//  A CURVE keypair as czmq certificates, NAME and NAME_secret, neither
//  overwritten; the secret one created 0600 (the umask, not a chmod
//  after: never readable by others, not even for a moment).
int
cli_cmd_keygen(int argc, char *argv[])
{
    static const struct option opts[] = {
        { "endpoint", required_argument, NULL, 'e' }, { NULL, 0, NULL, 0 }
    };
    const char *endpoint = NULL;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (c != 'e' || cli_endpoint("keygen", "--endpoint", optarg)) {
            fprintf(stderr, "usage: p2pkv keygen [--endpoint EP] NAME\n");
            return EXIT_ERROR;
        }
        endpoint = optarg;
    }
    if (optind != argc - 1) {
        if (optind < argc - 1)
            cli_bad("keygen", "one NAME, got \"%s\" too", argv[optind + 1]);
        else
            cli_bad("keygen", "no NAME");
        fprintf(stderr, "usage: p2pkv keygen [--endpoint EP] NAME\n");
        return EXIT_ERROR;
    }
    const char *name = argv[optind];
    char secret[4096];
    snprintf(secret, sizeof secret, "%s_secret", name);
    struct stat st;
    if (stat(name, &st) == 0 || stat(secret, &st) == 0) {
        fprintf(stderr, "p2pkv keygen: %s exists: not overwritten\n",
                stat(name, &st) == 0 ? name : secret);
        return EXIT_ERROR;
    }
    zcert_t *cert = zcert_new();
    if (!cert)
        return EXIT_ERROR;
    if (endpoint)
        zcert_set_meta(cert, "endpoint", "%s", endpoint);
    mode_t old = umask(077);
    int rc = zcert_save_secret(cert, secret);
    umask(old);
    if (rc == 0)
        rc = zcert_save_public(cert, name);
    if (rc != 0)
        fprintf(stderr, "p2pkv keygen: cannot write %s: %s\n", name, strerror(errno));
    else
        printf("%s %s\n", name, zcert_public_txt(cert));
    zcert_destroy(&cert);
    return rc == 0 ? EXIT_SUCCESS : EXIT_ERROR;
}

//  --curve-secret and --server-key into the client's config: the texts
//  live in the certificates, destroyed by the caller.  0, or -EINVAL
//  with the reason printed.
int
cli_curve_certs(const char *cmd, const char *secret, const char *server, zcert_t **mine,
                zcert_t **theirs, p2pkv_config_t *cfg)
{
    static const char zeros[41] = "0000000000000000000000000000000000000000";
    if (!secret)
        return 0;
    *mine = zcert_load(secret);
    *theirs = zcert_load(server);
    const char *bad = !*mine ? "--curve-secret: not a czmq certificate"
                      : streq(zcert_secret_txt(*mine), zeros) ? "--curve-secret: no secret key in it"
                      : !*theirs ? "--server-key: not a czmq certificate" : NULL;
    if (bad) {
        fprintf(stderr, "p2pkv %s: %s (%s)\n", cmd, bad, strncmp(bad, "--s", 3) ? secret : server);
        return -EINVAL;
    }
    cfg->curve_public = zcert_public_txt(*mine);
    cfg->curve_secret = zcert_secret_txt(*mine);
    cfg->curve_server = zcert_public_txt(*theirs);
    return 0;
}
