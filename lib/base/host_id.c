/*  host_id.c: this process's same-host identity (host_id.h).  */
#include "base/host_id.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

//  The kernel's boot id, one line of 36 characters.
static int
s_boot_id(char *out, size_t cap)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return -errno;
    char line[64] = "";
    int rc = fgets(line, sizeof line, f) ? 0 : -EIO;
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    if (rc == 0 && !*line)
        rc = -EIO;
    if (rc == 0)
        snprintf(out, cap, "%s", line);
    return rc;
}

int
pk_host_id(char *out, size_t cap)
{
    char boot[64];
    struct stat net, ipc;
    int rc = s_boot_id(boot, sizeof boot);
    if (rc == 0 && (stat("/proc/self/ns/net", &net) != 0 || stat("/proc/self/ns/ipc", &ipc) != 0))
        rc = -errno;
    if (rc != 0) {
        if (cap)
            *out = '\0';
        return rc;
    }
    snprintf(out, cap, "%s/net:%llu/ipc:%llu", boot, (unsigned long long) net.st_ino,
             (unsigned long long) ipc.st_ino);
    return 0;
}
