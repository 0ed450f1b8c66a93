/*  czmq_setup.h: what the library's entry points (p2pkv_client_new,
    p2pkv_describe, p2pkv_engine_open) do before their first socket.
*/
#ifndef PK_CZMQ_SETUP_H_INCLUDED
#define PK_CZMQ_SETUP_H_INCLUDED

/*  Once per process: czmq told to leave SIGINT and SIGTERM alone (unless
    the operator's ZSYS_SIGHANDLER says otherwise), and set up, before any
    of our threads makes a socket.  */
void pk_czmq_setup(void);

#endif
