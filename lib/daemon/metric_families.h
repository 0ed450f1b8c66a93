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
    PROVIDER (a data-plane provider the server opened a fabric for); or
    NONE, a family of one unlabelled sample.  Never both, and never a
    peer's id (unbounded: every consumer that ever connected).  A
    counter's name ends in _total, a histogram's in _seconds.

    SOURCE and VALUE say where the value is counted (metric_sources.h):
    HERE, by a pk_metrics_add or _observe where it happens (VALUE unused);
    or a struct of counts that one generic loop publishes
    (pk_metric_sources_publish), VALUE an expression of that struct s (and
    of block_len): SESSION, a session's pk_server_session_counters_t;
    REASONS, one reason's count of its by_reason; CHANNEL, a channel's
    pk_channel_stats_t; FABRIC, a fabric's pk_fabric_stats_t; POOL, the
    store's pk_store_stats_t; NAMESPACE, a namespace's pk_store_ns_stats_t;
    DIRECTORY, pk_directory_stats_t; NODE, the node's pk_node_counts_t.

    To add a metric: one row here, and the line that counts it (in the
    struct its SOURCE publishes, or a pk_metrics_add of its own).  Nothing
    else names it: the loop publishes every row of a source, and
    tests/e2e/test_metrics_e2e.c scrapes for every row.  No include guard: the
    file is meant to be included more than once.
*/

//  Frames and messages from consumers (the session's counters)
PK_METRIC(FRAMES, "p2pkv_frames_total", COUNTER,
          "Frames received from peers with a session", NONE,
          SESSION, s->frames)
PK_METRIC(FRAMES_DROPPED, "p2pkv_frames_dropped_total", COUNTER,
          "Frames dropped: not one JSON object, unknown type, or a stale epoch", NONE,
          SESSION, s->dropped_bad + s->dropped_unknown + s->dropped_stale)
PK_METRIC(LOOKUPS, "p2pkv_lookups_total", COUNTER, "Lookup messages", NONE,
          SESSION, s->lookups)
PK_METRIC(LOOKUP_KEYS, "p2pkv_lookup_keys_total", COUNTER, "Keys in lookup messages", NONE,
          SESSION, s->keys)
PK_METRIC(FETCHES, "p2pkv_fetches_total", COUNTER, "Fetch messages (rounds)", NONE,
          SESSION, s->fetches)
PK_METRIC(ABORTS, "p2pkv_aborts_total", COUNTER, "Abort messages", NONE,
          SESSION, s->aborts)
PK_METRIC(VIOLATIONS, "p2pkv_violations_total", COUNTER,
          "Sessions ended for a protocol violation", NONE,
          SESSION, s->violations)
PK_METRIC(VIOLATIONS_BY_REASON, "p2pkv_violations_by_reason_total", COUNTER,
          "Sessions ended for a protocol violation, by the rule broken", REASON,
          REASONS, *s)

//  Lookup answers and store jobs (the role's counters)
PK_METRIC(LOOKUP_HITS, "p2pkv_lookup_hits_total", COUNTER,
          "Lookup keys answered as hits (in wire order, repeats included)", NONE,
          SESSION, s->role.hits)
PK_METRIC(LOOKUP_MISSES, "p2pkv_lookup_misses_total", COUNTER,
          "Lookup keys answered as misses (in wire order, repeats included)", NONE,
          SESSION, s->role.misses)
PK_METRIC(LOOKUP_EXPIRED, "p2pkv_lookup_pending_expired_total", COUNTER,
          "Lookup keys still being written at the lookup deadline, answered as misses", NONE,
          SESSION, s->role.expired)
PK_METRIC(STORE_TIMEOUTS, "p2pkv_store_timeouts_total", COUNTER,
          "Store jobs that timed out, failing their round", NONE,
          SESSION, s->role.store_timeouts)

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
PK_METRIC(SESSIONS, "p2pkv_sessions", GAUGE, "Live sessions", NONE,
          NODE, s->sessions)
PK_METRIC(UNREAD_BYTES, "p2pkv_unread_bytes", GAUGE,
          "Bytes of answers handed to ZeroMQ and not yet written to their peers", NONE,
          NODE, s->unread_bytes)

//  The pool (the store's stats)
PK_METRIC(POOL_FREE, "p2pkv_pool_free_blocks", GAUGE, "Pool blocks free", NONE,
          POOL, s->free)
PK_METRIC(POOL_WRITING, "p2pkv_pool_writing_blocks", GAUGE,
          "Pool blocks reserved by the engine", NONE,
          POOL, s->writing)
PK_METRIC(POOL_READY, "p2pkv_pool_ready_blocks", GAUGE, "Pool blocks holding a key", NONE,
          POOL, s->ready)
PK_METRIC(POOL_PINNED, "p2pkv_pool_pinned_blocks", GAUGE,
          "Pool blocks pinned by transfers", NONE,
          POOL, s->pinned)
PK_METRIC(POOL_EVICTIONS, "p2pkv_pool_evictions_total", COUNTER,
          "Blocks evicted from the pool", NONE,
          POOL, s->evictions)

//  The pool by tenant namespace (the store's per-namespace stats, tenants.h):
//  blocks by the block's namespace, lookups by the asking consumer's (the
//  pool's own families above are the sums).
PK_METRIC(NS_READY, "p2pkv_namespace_ready_blocks", GAUGE,
          "Pool blocks holding a key, by namespace", NAMESPACE,
          NAMESPACE, s->ready)
PK_METRIC(NS_PINNED, "p2pkv_namespace_pinned_blocks", GAUGE,
          "Pool blocks pinned by transfers, by namespace", NAMESPACE,
          NAMESPACE, s->pinned)
PK_METRIC(NS_LOOKUPS, "p2pkv_namespace_lookups_total", COUNTER,
          "Keys looked up in the pool, by the consumer's namespace", NAMESPACE,
          NAMESPACE, s->lookups)
PK_METRIC(NS_HITS, "p2pkv_namespace_hits_total", COUNTER,
          "Keys looked up and found ready (own or shared), by the consumer's namespace",
          NAMESPACE,
          NAMESPACE, s->hits)
PK_METRIC(NS_MISSES, "p2pkv_namespace_misses_total", COUNTER,
          "Keys looked up and not found (another namespace's count as absent), by the "
          "consumer's namespace", NAMESPACE,
          NAMESPACE, s->misses)

//  Latencies (the session's timers)
PK_METRIC(LOOKUP_SECONDS, "p2pkv_lookup_seconds", HISTOGRAM,
          "Lookup receipt to lookup_resp", NONE,
          HERE, 0)
PK_METRIC(FETCH_SECONDS, "p2pkv_fetch_seconds", HISTOGRAM,
          "Fetch receipt to transfer_done or abort_ack", NONE,
          HERE, 0)

//  The cluster directory (issue 14; the directory actor's counters)
PK_METRIC(DIRECTORY_UP, "p2pkv_directory_up", GAUGE,
          "1 while the directory (--directory) is connected and in sync, else 0", NONE,
          DIRECTORY, s->up)
PK_METRIC(DIRECTORY_UPDATES, "p2pkv_directory_updates_total", COUNTER,
          "Key additions and removals sent to the directory", NONE,
          DIRECTORY, s->updates)
PK_METRIC(DIRECTORY_BATCHES, "p2pkv_directory_batches_total", COUNTER,
          "Pipelines (one round trip each) that carried them", NONE,
          DIRECTORY, s->batches)
PK_METRIC(DIRECTORY_DROPPED, "p2pkv_directory_dropped_total", COUNTER,
          "Changes lost to a full directory queue, then covered by a resync", NONE,
          DIRECTORY, s->dropped)
PK_METRIC(DIRECTORY_ERRORS, "p2pkv_directory_errors_total", COUNTER,
          "Directory connections refused or lost", NONE,
          DIRECTORY, s->errors)
PK_METRIC(DIRECTORY_JUNK, "p2pkv_directory_junk_total", COUNTER,
          "Directory entries that did not parse, ignored", NONE,
          DIRECTORY, s->junk)
PK_METRIC(DIRECTORY_RESYNCS, "p2pkv_directory_resyncs_total", COUNTER,
          "Whole pools republished to the directory", NONE,
          DIRECTORY, s->resyncs)
