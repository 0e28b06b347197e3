// Package worker gives runners — processes that consume jobs from a queue
// rather than serve requests, and may be busy with one job for hours —
// probes that watch the consume loop, a drain that loses no job, and
// rollout epochs. It runs on a [lameduck.Lifecycle] configured as a
// runner's: a runner's defaults, its drain modes ([DrainComplete],
// [DrainInterrupt]) and its own settings (Config.Epoch,
// Config.EpochMismatchDelay, Config.FetchWait), read from the same
// LAMEDUCK_* variables with the same strict parsing. [Resolve] resolves
// them as [New] does, for tools such as lameduck vet.
// The operator's guide is docs/runners.md.
//
// # Probes
//
// A runner has no HTTP server of its own, so its probes get a listener of
// their own: Config.ProbeAddr, LAMEDUCK_PROBE_ADDR, default ":9090" (the
// metrics port, where /metrics can live too). Liveness is not a TCP check:
// a socket proves the process listens, which it does from boot to exit,
// even with its consumer dead. Instead:
//
//	probe     answers                                       when
//	/healthz  200 ok                                        a job is in flight (however long), or the idle loop cycles
//	/healthz  503 {"status":"stalled","idle_for":"7m12s"}   an idle loop has not cycled for max(2m, 20 × its fetch wait)
//	/readyz   503 starting                                  before every loop has cycled once (or its Source said it is consuming)
//	/readyz   503 superseded                                a newer rollout epoch exists
//	/readyz   200 ok, 200 degraded, 503 failed              the Lifecycle's readiness checks, otherwise
//	/readyz   503 {"status":"draining","busy":true}         from the signal on; busy while a job runs
//
// A cycle is a fetch that returned (a job, nothing, or an error), a job
// that ended, or, while the runner is superseded and fetches nothing on
// purpose, each pause of one fetch wait. A fetch that ended in silence
// ([ErrNoReply]) is not. While a job runs, /healthz says "busy" with the
// oldest job's "job" and "job_age". Every body carries version and commit.
//
// # The job-source contract
//
// Every job a queue delivers ends acknowledged or handed back where the
// queue will deliver it again; [Source] says what a queue's client must
// guarantee for that, [Drainer] how it gives back what it buffered, and the
// package sourcetest checks a Source against a real queue. A runner
// delivers at least once: a job may run again after a crash, so a handler
// makes its effect idempotent or checkpointed.
//
// # Hand-backs
//
// A hand-back is a runner returning an unfinished job to its queue, for
// another replica to run. [Job.HandBack] learns from [HandBackCause] whether the job failed (nil:
// it should count against the queue's delivery limit) or the runner gives
// it back for its own reason (it must stay deliverable, whatever the
// limit); docs/runners.md, "Hand-backs and delivery limits".
//
// # Drain
//
// From the signal (SIGTERM) on no loop asks for a new job; a fetch under way
// is waited for, not cancelled, and its job handed back unstarted. In mode "complete"
// (LAMEDUCK_DRAIN_MODE, the default) the job in flight finishes, bounded by
// LAMEDUCK_DRAIN_TIMEOUT (default: what LAMEDUCK_TERMINATION_GRACE leaves
// after the teardown and a margin; 8h when the grace is unknown); at the
// bound its context is cancelled (cause [ErrDrainBound]), the log names it
// with its age, it is handed back, and Run returns an error so the process
// exits non-zero before the kubelet's SIGKILL. In
// mode "interrupt" its context is cancelled at once (cause
// [ErrInterrupted]) so it can checkpoint. A job whose handler returns an
// error is handed back to the queue (after Config.FailureBackoff when it
// failed on its own); one that returns nil is acknowledged.
// A handler that ignores its cancelled context has its job handed back at
// the end of the teardown's hook share while it still runs, so no job
// waits for the queue's ack deadline. In the Lifecycle's shutdown timeline
// (lameduck.Events) the lame-duck window is this drain: it lasts until
// the jobs in flight end, at most DrainTimeout. The pod's
// terminationGracePeriodSeconds must cover the drain bound plus the
// teardown (the checkpoint margin); the startup log does that sum, naming
// the window "runner drain bound".
//
// Whether a job is in flight never depends on its ID: a job with an empty
// ID (or one whose ID panics) is named <loop>#<n> in logs, n its delivery's
// number in the loop. Startup tasks added to the Lifecycle run before the
// loops start.
//
// # Rollout epochs
//
// LAMEDUCK_EPOCH is the runner's generation, rendered into its pod
// template. An [EpochSource] reports the newest epoch among the runners
// alive now; a runner whose epoch is older is superseded: readiness 503,
// and its loops stop fetching, so the newer fleet gets every job at once. A
// job delivered to it as it became superseded is handed back, once, with a
// delay (LAMEDUCK_EPOCH_MISMATCH_DELAY, default 2m). A job in flight when
// the fleet moves on finishes where it is, so no job runs twice at once.
// When the newer runners are gone (a rollback) the newest epoch falls back
// and the older runners fetch again.
// [StaticEpochs] is the source that never changes; lameduck's demo worker
// has one on NATS JetStream key-value.
//
// The package imports only the standard library and lameduck.
package worker
