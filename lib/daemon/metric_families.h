/*  metric_families.h: every metric the daemon exports, declared once.

    An X-macro table: each row is

        PK_METRIC(ID, "name", TYPE, "help", LABEL, SOURCE, VALUE)

    and whoever includes this file defines PK_METRIC first.  metrics.h
    turns the rows into the enum pk_metric_id_t (PK_M_ID), so an update
    names its family by an identifier the compiler checks:

        pk_metrics_add(m, PK_M_LOOKUPS, peer, n);

    and pk_metrics_new declares every row, in this order (the order of the
    Prometheus text).  TYPE is COUNTER, GAUGE or HISTOGRAM; LABEL is the
    one label every sample of the family carries, from a bounded set:
    REASON (a fixed class, e.g. of protocol violation), NAMESPACE (a
    namespace of --tenants: values only from the operator's file) or
    PROVIDER (a data-plane provider the server opened a fabric for),
    RAIL (a local address of --fabric-addr's list, at most 8); or
    NONE, a family of one unlabelled sample.  Never both, and never a
    peer's id (unbounded: every consumer that ever connected).  A
    counter's name ends in _total, a histogram's in _seconds.

    SOURCE and VALUE say where the value is counted (metric_sources.h):
    HERE, by a pk_metrics_add or _observe where it happens (VALUE unused);
    or a struct of counts that one generic loop publishes
    (pk_metric_sources_publish), VALUE an expression of that struct s (and
    of block_len): SESSION, a session's pk_server_session_counters_t (the
    role's pk_server_role_counters_t among them); REASONS, one reason's
    count of its by_reason; MISSES, one miss reason's count of the role's
    miss_reasons; CHANNEL, a channel's pk_channel_stats_t;
    FABRIC, a fabric's pk_fabric_stats_t; POOL, the store's
    pk_store_stats_t; NAMESPACE, a namespace's pk_store_ns_stats_t;
    DIRECTORY, pk_directory_stats_t; NODE, the node's pk_node_counts_t;
    TIER, the disk tier's pk_disk_tier_stats_t.

    Most rows are not written here: each struct of counts but the
    transport's is declared by a list in its own header (base/counts.h),
    whose rows M(field, ID, "name", TYPE, "help", LABEL) are both a field
    of the struct and a metric, and this file maps each list to PK_METRIC
    rows with VALUE s->field: PK_SERVER_SESSION_COUNTS
    (roles/server_session.h), PK_SERVER_ROLE_COUNTS (roles/server_role.h),
    PK_STORE_COUNTS and PK_STORE_NS_COUNTS (store/store.h),
    PK_DIRECTORY_COUNTS (directory.h), PK_NODE_COUNTS (node_counts.h) and
    PK_DISK_TIER_COUNTS (tier/disk_tier.h).
    metrics.h includes those headers.  A list's F(field) rows are fields
    with no metric of their own.  The rows written here are the rest: a
    metric that combines fields (p2pkv_frames_dropped_total sums three F
    fields), those counted HERE, and those over the transport's structs
    (CHANNEL, FABRIC), which stay in base/transport.h because they are the
    seam's, filled by each transport (doc/design.md).

    To add a metric (the files touched, measured by adding one to each
    source):
    - a count of one of those structs: its M row in the source's list, and
      the line that counts it (server_session.c, server_role.c, store.c,
      directory.c, node.c): 2 files (4 for a pool count the store's index
      keeps: index.h and index.c too).
    - counted where it happens: a row here, and its pk_metrics_add: 2.
    - a channel's or a fabric's: a row here, its field in base/transport.h,
      and its count in each transport that has it (7 files for one that
      ofi, mmap and the test transport all count).
    Nothing else names it: the loop publishes every row of a source, and
    tests/e2e/test_metrics_e2e.c scrapes for every row.  No include guard: the
    file is meant to be included more than once.
*/

//  Frames and messages from consumers (the session's counts,
//  roles/server_session.h), the frames it dropped (whatever the reason),
//  and its violations by class
#define PK_ROW_SESSION(field, id, name, type, help, label) \
    PK_METRIC(id, name, type, help, label, SESSION, s->field)
PK_SERVER_SESSION_COUNTS(PK_ROW_SESSION, PK_COUNT_NO_METRIC)
#undef PK_ROW_SESSION
PK_METRIC(FRAMES_DROPPED, "p2pkv_frames_dropped_total", COUNTER,
          "Frames dropped: not one JSON object, unknown type, or a stale epoch", NONE,
          SESSION, s->dropped_bad + s->dropped_unknown + s->dropped_stale)
PK_METRIC(VIOLATIONS_BY_REASON, "p2pkv_violations_by_reason_total", COUNTER,
          "Sessions ended for a protocol violation, by the rule broken", REASON,
          REASONS, *s)

//  Lookup answers and store jobs (the role's counts, roles/server_role.h,
//  kept in the session's)
#define PK_ROW_ROLE(field, id, name, type, help, label) \
    PK_METRIC(id, name, type, help, label, SESSION, s->role.field)
PK_SERVER_ROLE_COUNTS(PK_ROW_ROLE, PK_COUNT_NO_METRIC)
#undef PK_ROW_ROLE
//  the misses again, by why (base/miss_reason.h: the label's values are
//  its names), whether or not the consumer asked for the reasons
PK_METRIC(LOOKUP_MISSES_BY_REASON, "p2pkv_lookup_misses_by_reason_total", COUNTER,
          "Lookup keys answered as misses, by reason: absent, evicted, pending (the lookup "
          "deadline passed while it was written), quota, writing, draining, unknown", REASON,
          MISSES, *s)

//  The data plane (the transport's stats)
PK_METRIC(WRITES, "p2pkv_writes_total", COUNTER, "RMA writes posted", NONE,
          CHANNEL, s->writes_posted)
PK_METRIC(BLOCKS_WRITTEN, "p2pkv_blocks_written_total", COUNTER,
          "Blocks written to consumers", NONE,
          CHANNEL, s->blocks_written)
PK_METRIC(BYTES_WRITTEN, "p2pkv_bytes_written_total", COUNTER,
          "Bytes written to consumers", NONE,
          CHANNEL, s->blocks_written * block_len)
PK_METRIC(WRITE_ERRORS, "p2pkv_write_errors_total", COUNTER,
          "Completion-queue error entries", NONE,
          CHANNEL, s->errors)
PK_METRIC(TRANSFERS_IN_FLIGHT, "p2pkv_transfers_in_flight", GAUGE, "Transfers in flight", NONE,
          CHANNEL, s->transfers)
PK_METRIC(BLOCKS_CORRUPT, "p2pkv_blocks_corrupt_total", COUNTER,
          "Blocks a pull landed whose bytes differ from the checksum their server announced "
          "(never committed)", NONE,
          HERE, 0)

//  Several rails (--fabric-addr A,B; transports/rails): per local rail,
//  every session's writes over it, summed (the peer's actor adds what
//  moved since its last step)
PK_METRIC(RAIL_WRITES, "p2pkv_rail_writes_total", COUNTER,
          "RMA writes posted over a rail (its local address)", RAIL,
          HERE, 0)
PK_METRIC(RAIL_BYTES, "p2pkv_rail_bytes_written_total", COUNTER,
          "Bytes written to consumers over a rail (its local address)", RAIL,
          HERE, 0)
PK_METRIC(RAIL_FAILURES, "p2pkv_rail_failures_total", COUNTER,
          "Failed writes over a rail (its local address), and each time it was taken out", RAIL,
          HERE, 0)
PK_METRIC(RAIL_RATE, "p2pkv_rail_rate_bytes_per_second", GAUGE,
          "Bytes per second a rail confirmed while it had writes out, as its sessions measure "
          "it (an EWMA each, summed; a rail's share of writes follows it)", RAIL,
          HERE, 0)
PK_METRIC(RAIL_REJOINS, "p2pkv_rail_rejoins_total", COUNTER,
          "Times a rail taken out was paired again with a consumer's fresh registration "
          "(its local address)", RAIL,
          HERE, 0)

//  The data plane (the transport's fabric stats)
//  per fabric, labelled by its provider (--provider shm,tcp opens two)
PK_METRIC(CHANNELS_OPENED, "p2pkv_channels_opened_total", COUNTER,
          "Data-plane channels (endpoint, queue, address vector) opened for consumers",
          PROVIDER,
          FABRIC, s->channels_opened)
PK_METRIC(CHANNELS_OPEN, "p2pkv_channels_open", GAUGE,
          "Data-plane channels open now, per provider", PROVIDER,
          FABRIC, s->channels_open)
PK_METRIC(BLOBS_REFUSED, "p2pkv_connect_blobs_refused_total", COUNTER,
          "Connects refused for their address blob, before any channel existed (a "
          "provider this server does not offer: provider=\"unoffered\")", PROVIDER,
          FABRIC, s->blobs_refused)

//  Sessions (the node)
PK_METRIC(CONNECTIONS_REFUSED, "p2pkv_connections_refused_total", COUNTER,
          "Connections or frames refused before a session: address (--allow), unknown_key, "
          "revoked, mechanism, handshake, key_changed (CURVE); a session that could not start: "
          "out_of_descriptors, out_of_threads (ulimit -n, ulimit -u or the cgroup's pids.max), "
          "out_of_memory", REASON,
          HERE, 0)
PK_METRIC(SESSIONS_REVOKED, "p2pkv_sessions_revoked_total", COUNTER,
          "Sessions ended because a SIGHUP revoked their CURVE key", NONE,
          HERE, 0)
PK_METRIC(SESSIONS_OPENED, "p2pkv_sessions_opened_total", COUNTER, "Sessions opened", NONE,
          HERE, 0)
PK_METRIC(SESSIONS_RETIRED, "p2pkv_sessions_retired_total", COUNTER, "Sessions retired", NONE,
          HERE, 0)
//  the node's own counts (node_counts.h)
#define PK_ROW_NODE(field, id, name, type, help, label) \
    PK_METRIC(id, name, type, help, label, NODE, s->field)
PK_NODE_COUNTS(PK_ROW_NODE, PK_COUNT_NO_METRIC)
#undef PK_ROW_NODE

//  The pool (the store's counts, store/store.h)
#define PK_ROW_POOL(field, id, name, type, help, label) \
    PK_METRIC(id, name, type, help, label, POOL, s->field)
PK_STORE_COUNTS(PK_ROW_POOL, PK_COUNT_NO_METRIC)
#undef PK_ROW_POOL

//  The pool by tenant namespace (the store's per-namespace counts,
//  store/store.h; tenants.h): blocks by the block's namespace, lookups by
//  the asking consumer's (the pool's own families above are the sums).
#define PK_ROW_NAMESPACE(field, id, name, type, help, label) \
    PK_METRIC(id, name, type, help, label, NAMESPACE, s->field)
PK_STORE_NS_COUNTS(PK_ROW_NAMESPACE, PK_COUNT_NO_METRIC)
#undef PK_ROW_NAMESPACE

//  Latencies (the session's timers)
PK_METRIC(LOOKUP_SECONDS, "p2pkv_lookup_seconds", HISTOGRAM,
          "Lookup receipt to lookup_resp", NONE,
          HERE, 0)
PK_METRIC(FETCH_SECONDS, "p2pkv_fetch_seconds", HISTOGRAM,
          "Fetch receipt to transfer_done or abort_ack", NONE,
          HERE, 0)
PK_METRIC(WRITE_QUEUE_SECONDS, "p2pkv_write_queue_seconds", HISTOGRAM,
          "A transfer's wait for the fair share's grant: the role's write to its first "
          "write handed to the data plane (--fair-inflight)", NONE,
          HERE, 0)

//  The cluster directory (issue 14; the directory actor's counts,
//  directory.h)
#define PK_ROW_DIRECTORY(field, id, name, type, help, label) \
    PK_METRIC(id, name, type, help, label, DIRECTORY, s->field)
PK_DIRECTORY_COUNTS(PK_ROW_DIRECTORY, PK_COUNT_NO_METRIC)
#undef PK_ROW_DIRECTORY

//  The disk tier under the pool (--spill-dir; the tier's counts,
//  tier/disk_tier.h), and how long a block took from the lookup that
//  asked for it to its landing in the pool (the tier's landed callback,
//  node.c)
#define PK_ROW_TIER(field, id, name, type, help, label) \
    PK_METRIC(id, name, type, help, label, TIER, s->field)
PK_DISK_TIER_COUNTS(PK_ROW_TIER, PK_COUNT_NO_METRIC)
#undef PK_ROW_TIER
PK_METRIC(SPILL_READ_SECONDS, "p2pkv_spill_read_seconds", HISTOGRAM,
          "A spilled block's promotion: the lookup that asked for it to its landing in the "
          "pool (read, checked, committed), or to its failure", NONE,
          HERE, 0)
