/*  log.c: the daemon's log lines (log.h).  */
#include "daemon/log.h"

#include <stdarg.h>
#include <stdio.h>

void
pk_log(const pk_server_config_t *config, int level, const char *fmt, ...)
{
    if (level > config->log_level)
        return;
    static const char *names[] = { "error", "warn", "info", "debug" };
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "p2pkv-server %s: ", names[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
