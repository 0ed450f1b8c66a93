/*  version.h: the one place the program version comes from (configure.ac).  */
#ifndef PK_VERSION_H_INCLUDED
#define PK_VERSION_H_INCLUDED
#include "config.h"
#define PK_VERSION PACKAGE_VERSION
#endif
