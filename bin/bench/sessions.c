#include "bench.h"
int pkb_sessions(const pkb_opts_t *o) { (void) o; return 2; }
