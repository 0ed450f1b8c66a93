/*  rails_addr.c: the local addresses of a rails fabric, checked against
    this host's interfaces (getifaddrs), and the subnet rule of pairing.  */
#include "base/err.h"
#include "rails/rails.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

//  An address's bytes (4 or 16) from its text; 0 when it is none.
static size_t
s_parse(const char *text, int *family_p, uint8_t *out)
{
    if (inet_pton(AF_INET, text, out) == 1) {
        *family_p = AF_INET;
        return 4;
    }
    if (inet_pton(AF_INET6, text, out) == 1) {
        *family_p = AF_INET6;
        return 16;
    }
    return 0;
}

static size_t
s_bytes(const struct sockaddr *sa, uint8_t *out)
{
    if (sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        return 4;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *) sa)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

static bool
s_masked_equal(const uint8_t *a, const uint8_t *b, const uint8_t *mask, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((a[i] & mask[i]) != (b[i] & mask[i]))
            return false;
    return true;
}

//  The interface holding a: its own address first, else a loopback
//  interface whose subnet holds it.  -EADDRNOTAVAIL when none.
static int
s_find(struct ifaddrs *ifs, pk_rails_addr_t *a, size_t len)
{
    static const uint8_t all[16] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
    for (int pass = 0; pass < 2; pass++)
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            uint8_t b[16], m[16];
            if (!i->ifa_addr || i->ifa_addr->sa_family != a->family
                || s_bytes(i->ifa_addr, b) != len)
                continue;
            bool lo = (i->ifa_flags & IFF_LOOPBACK) != 0;
            if (!i->ifa_netmask || s_bytes(i->ifa_netmask, m) != len)
                memcpy(m, all, len);
            if (pass == 0 ? memcmp(a->addr, b, len) != 0
                          : !lo || !s_masked_equal(a->addr, b, m, len))
                continue;
            snprintf(a->ifname, sizeof a->ifname, "%s", i->ifa_name);
            a->loopback = lo;
            memcpy(a->mask, m, len);
            return 0;
        }
    return -EADDRNOTAVAIL;
}

int
pk_rails_addrs(const char *node, pk_rails_addr_t *out, size_t cap, size_t *n_p, char *err)
{
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) != 0)
        return pk_err(err, -errno, "getifaddrs: %s", strerror(errno));
    int rc = 0;
    size_t n = 0;
    //  every piece between commas, a trailing one's empty piece included
    for (const char *at = node; !rc; at++) {
        size_t len = strcspn(at, ",");
        if (n == cap) {
            rc = pk_err(err, -EINVAL, "%s: at most %zu rails", node, cap);
            break;
        }
        pk_rails_addr_t *a = &out[n];
        *a = (pk_rails_addr_t) { 0 };
        if (len == 0 || len >= sizeof a->text) {
            rc = pk_err(err, -EINVAL, "%s: an empty or overlong address in the list", node);
            break;
        }
        memcpy(a->text, at, len);
        at += len;
        bool last = *at == '\0';
        size_t blen = s_parse(a->text, &a->family, a->addr);
        if (!blen)
            rc = pk_err(err, -EINVAL, "%s: not a numeric IPv4 or IPv6 address (a rail is "
                        "named by its address)", a->text);
        else if (s_find(ifs, a, blen) != 0)
            rc = pk_err(err, -EINVAL, "%s: not an address of this host", a->text);
        for (size_t k = 0; !rc && k < n; k++)
            if (strcmp(out[k].text, a->text) == 0)
                rc = pk_err(err, -EINVAL, "%s: listed twice", a->text);
            else if (!a->loopback && strcmp(out[k].ifname, a->ifname) == 0)
                rc = pk_err(err, -EINVAL, "%s and %s: both on %s (one rail per interface; "
                            "only loopback may carry several)", out[k].text, a->text,
                            a->ifname);
        n++;
        if (last)
            break;
    }
    freeifaddrs(ifs);
    *n_p = rc ? 0 : n;
    return rc;
}

bool
pk_rails_same_subnet(const pk_rails_addr_t *ours, const char *peer)
{
    uint8_t b[16];
    int family;
    size_t len = s_parse(peer, &family, b);
    return len && family == ours->family && s_masked_equal(ours->addr, b, ours->mask, len);
}
