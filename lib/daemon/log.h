/*  log.h: the daemon's log lines (private to lib/daemon).

    One line on stderr, "p2pkv-server LEVEL: text", when --log-level lets
    that level through.  Every class of the daemon logs through it with
    the configuration it was given, so none needs the node for a line.
*/
#ifndef PK_LOG_H_INCLUDED
#define PK_LOG_H_INCLUDED

#include "daemon/server_config.h"

/*  Writes the line when level is at most config's log_level (PK_LOG_*).  */
void pk_log(const pk_server_config_t *config, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
