package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lameduck/lameduck/cmd/lameduck/internal/rollout"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// Flags of one mode only: each is refused in the other, by name.
var (
	localOnlyFlags = []string{"replicas", "mode", "probe-path", "probe-period", "probe-failures", "probe-timeout",
		"removal-delay", "grace", "stop-timeout", "start-timeout", "rand", "env", "logs"}
	clusterOnlyFlags = []string{"kubeconfig", "context", "namespace", "url", "rollout-timeout"}
)

func newRolloutCommand() *cobra.Command {
	var shared loadOptions
	var local localOptions
	var cluster rollout.KubeOptions
	cmd := &cobra.Command{
		Use:   "rollout [flags] -- COMMAND ARGS... | rollout [flags] --url URL deployment/NAME",
		Short: "Run a server through rolling restarts under load, simulated or on a real cluster, and count every failed request",
		Long: `Locally (-- COMMAND): run COMMAND as --replicas replicas on loopback ports
(each gets its own in PORT, and {port} in any argument is replaced by it),
behind a load balancer that polls each replica's readiness path like a
readinessProbe, send open-loop load through it, and restart every replica
--rounds times the way a Deployment does (one surge replica, none
unavailable): the new one must be in rotation before the old one gets
SIGTERM. The balancer forgets a terminating replica after a delay drawn
from --removal-delay, asynchronously, as the endpoints controller and
kube-proxy do: a server that stops serving before then fails requests. At
the end the replicas left get SIGTERM and --stop-timeout to drain.

--mode l7 is an ingress (its own keep-alive pool per replica, no retries);
--mode l4 is kube-proxy (each client connection pinned to one replica).

Replicas get LAMEDUCK_ENV=kubernetes (unless set) so a lameduck server uses its
Kubernetes defaults, and PORT.

On a cluster (deployment/NAME): restart the Deployment --rounds times as
kubectl rollout restart does, under the same open-loop load sent to --url
(a ClusterIP reached from a node, a NodePort, an ingress), wait for each
rollout to complete, and report each pod's timeline as the API saw it
(deletion, endpoint not ready, container exit, a SIGKILL at the grace
period). --kubeconfig, --context and --namespace work as kubectl's.

The report counts requests, failures by kind (status, refused, reset, EOF,
timeout), requests the client re-sent and latency percentiles. Exit code: 0
when no request failed, 1 when any did, 2 when the rollout could not run.

Examples:
  lameduck rollout --report rollout.html -- lameduck demo --addr 127.0.0.1:{port}
  lameduck rollout -n shop --url http://10.96.0.10:80 --rounds 2 deployment/web`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if shared.format != "text" && shared.format != "json" {
				return usageError{fmt.Errorf("--format=%q: use text or json", shared.format)}
			}
			before, after := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				before, after = args[:dash], args[dash:]
			}
			if len(before) > 0 || (len(after) == 0 && changedFlag(cmd, clusterOnlyFlags) != "") {
				return runClusterRollout(cmd, shared, cluster, before, after)
			}
			return runLocalRollout(cmd, shared, local, after)
		},
	}
	shared.addFlags(cmd)
	local.addFlags(cmd)
	addClusterFlags(cmd, &cluster)
	return cmd
}

// loadOptions are the options both modes take: the load sent through the
// restarts, and the report's format and HTML file.
type loadOptions struct {
	rollout.Load
	format, report string
}

// addFlags registers the flags of the options both modes take.
func (o *loadOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.Rounds, "rounds", 2, "rolling restarts of every replica (local), of the Deployment (cluster)")
	f.IntVar(&o.Rate, "rate", 200, "requests per second, open loop")
	f.StringVar(&o.GetPath, "get", "/", "path of the GET requests (empty: none)")
	f.StringVar(&o.PostPath, "post", "/echo", "path of the POST requests, every other request (empty: none)")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Second, "timeout of each request")
	f.DurationVar(&o.Warmup, "warmup", time.Second, "load before the first restart")
	f.DurationVar(&o.Cooldown, "cooldown", time.Second, "load after the last old replica exited (local), the last rollout completed (cluster)")
	f.StringVar(&o.format, "format", "text", "report format on stdout: text or json")
	f.StringVar(&o.report, "report", "", "also write a self-contained HTML report with a timeline to FILE")
}

// localOptions are the options of local replicas only (localOnlyFlags):
// the rollout.Options besides the load and the command, with
// --removal-delay as given.
type localOptions struct {
	rollout.Options
	removal string
}

// addFlags registers localOnlyFlags.
func (o *localOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.Replicas, "replicas", 3, "local: replicas kept serving")
	f.StringVar(&o.Mode, "mode", rollout.ModeL7, "local: balancer: l7 (an ingress: keep-alive pool, no retries) or l4 (kube-proxy: connections pinned)")
	f.StringVar(&o.ProbePath, "probe-path", "/readyz", "local: readiness path the balancer polls")
	f.DurationVar(&o.ProbePeriod, "probe-period", 2*time.Second, "local: readiness poll period (readinessProbe periodSeconds)")
	f.IntVar(&o.ProbeFailures, "probe-failures", 2, "local: consecutive failed polls that take a replica out (failureThreshold)")
	f.DurationVar(&o.ProbeTimeout, "probe-timeout", 3*time.Second, "local: readiness poll timeout (timeoutSeconds)")
	f.StringVar(&o.removal, "removal-delay", "1s-3s", "local: MIN-MAX: the balancer forgets a replica this long after its SIGTERM, drawn uniformly")
	f.DurationVar(&o.Grace, "grace", 45*time.Second, "local: SIGKILL a replica this long after SIGTERM (terminationGracePeriodSeconds)")
	f.DurationVar(&o.StopTimeout, "stop-timeout", 0, "local: the replicas left at the end get SIGTERM and this long to drain and exit before SIGKILL (default: --grace)")
	f.DurationVar(&o.StartTimeout, "start-timeout", 30*time.Second, "local: longest wait for a new replica to be ready")
	f.Uint64Var(&o.Rand, "rand", 0, "local: start the random removal delays from this number, to repeat a run (0: a random one; the report prints it)")
	f.StringArrayVar(&o.Env, "env", nil, "local: KEY=VALUE added to every replica's environment (repeatable)")
	f.StringVar(&o.LogDir, "logs", "", "local: keep each replica's output in DIR/replica-N.log")
}

// addClusterFlags registers clusterOnlyFlags.
func addClusterFlags(cmd *cobra.Command, o *rollout.KubeOptions) {
	f := cmd.Flags()
	f.StringVar(&o.Kubeconfig, "kubeconfig", "", "cluster: the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.Context, "context", "", "cluster: the kubeconfig context (default: its current context)")
	f.StringVarP(&o.Namespace, "namespace", "n", "", "cluster: the Deployment's namespace (default: the context's, else default)")
	f.StringVar(&o.URL, "url", "", "cluster: where the load goes, http://HOST[:PORT]: a ClusterIP from a node, a NodePort, an ingress")
	f.DurationVar(&o.RolloutTimeout, "rollout-timeout", 5*time.Minute, "cluster: the longest wait for each rollout to complete (new ReplicaSet available, old pods gone)")
}

// changedFlag returns the first of names set on the command line, or "".
func changedFlag(cmd *cobra.Command, names []string) string {
	for _, n := range names {
		if cmd.Flags().Changed(n) {
			return n
		}
	}
	return ""
}

// runLocalRollout runs command as local replicas behind a simulated
// balancer and restarts them under shared's load.
func runLocalRollout(cmd *cobra.Command, shared loadOptions, local localOptions, command []string) error {
	if f := changedFlag(cmd, clusterOnlyFlags); f != "" {
		return usageError{fmt.Errorf("--%s is for a cluster (deployment/NAME), not local replicas (-- COMMAND): drop --%s", f, f)}
	}
	o := local.Options
	o.Load, o.Command = shared.Load, command
	min, max, err := parseRange(local.removal)
	if err != nil {
		return usageError{err}
	}
	o.RemovalMin, o.RemovalMax = min, max
	if !cmd.Flags().Changed("stop-timeout") {
		o.StopTimeout = o.Grace
	}
	if os.Getenv("LAMEDUCK_ENV") == "" {
		o.Env = append([]string{"LAMEDUCK_ENV=kubernetes"}, o.Env...)
	}
	return runRollout(cmd, o.Replicas*o.Rounds, shared.format, shared.report, func(ctx context.Context, progress func(int, int, int, int), warn func(string)) (*rollout.Report, error) {
		o.Progress, o.Warn = progress, warn
		return rollout.Run(ctx, o)
	})
}

// runClusterRollout restarts the one Deployment of deployments on a real
// cluster under shared's load; command, the words after --, must be empty.
func runClusterRollout(cmd *cobra.Command, shared loadOptions, cluster rollout.KubeOptions, deployments, command []string) error {
	switch {
	case len(command) > 0:
		return usageError{fmt.Errorf("both a Deployment (%s) and a command (-- %s): give deployment/NAME for a cluster, or -- COMMAND for local replicas", strings.Join(deployments, " "), strings.Join(command, " "))}
	case len(deployments) == 0:
		return usageError{fmt.Errorf("--%s is for a cluster: name the Deployment too, such as: lameduck rollout --url http://10.96.0.10:80 deployment/NAME (a local command goes after --)", changedFlag(cmd, clusterOnlyFlags))}
	case len(deployments) > 1:
		return usageError{fmt.Errorf("one Deployment at a time, not %q (a local command goes after --)", strings.Join(deployments, " "))}
	}
	if f := changedFlag(cmd, localOnlyFlags); f != "" {
		return usageError{fmt.Errorf("--%s is for local replicas (-- COMMAND); on a cluster the Deployment's own spec decides it: drop --%s", f, f)}
	}
	cluster.Load, cluster.Deployment = shared.Load, deployments[0]
	return runRollout(cmd, cluster.Rounds, shared.format, shared.report, func(ctx context.Context, progress func(int, int, int, int), warn func(string)) (*rollout.Report, error) {
		cluster.Progress, cluster.Warn = progress, warn
		return rollout.RunKube(ctx, cluster)
	})
}

// parseRange parses --removal-delay: "1s-3s", or "2s" for a fixed delay.
func parseRange(s string) (min, max time.Duration, err error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		hi = lo
	}
	min, err1 := time.ParseDuration(strings.TrimSpace(lo))
	max, err2 := time.ParseDuration(strings.TrimSpace(hi))
	if err := errors.Join(err1, err2); err != nil || min < 0 || max < min {
		return 0, 0, fmt.Errorf("--removal-delay=%q: want MIN-MAX Go durations with 0 ≤ MIN ≤ MAX, such as 1s-3s, or one duration", s)
	}
	return min, max, nil
}

// runRollout runs one rollout with a progress bar of total steps on a
// terminal, prints its report and turns its outcome into the exit code.
func runRollout(cmd *cobra.Command, total int, format, htmlPath string,
	run func(ctx context.Context, progress func(done, total, requests, failed int), warn func(string)) (*rollout.Report, error)) error {
	stderr := cmd.ErrOrStderr()
	warn := func(s string) { fmt.Fprintln(stderr, "lameduck rollout:", s) }
	var progress func(done, total, requests, failed int)
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions(total,
			progressbar.OptionSetWriter(f),
			progressbar.OptionSetDescription("restarts"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		progress = func(done, total, requests, failed int) {
			bar.Describe(fmt.Sprintf("restarts · %d requests · %d failed", requests, failed))
			_ = bar.Set(done)
		}
		defer bar.Exit()
	}
	// Ctrl-C or a SIGTERM to the tool stops the run and every replica it
	// started (each gets SIGTERM and its drain), instead of leaving them
	// behind; a second one ends the tool at once.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	rep, err := run(ctx, progress, warn)
	if ctx.Err() != nil && err != nil {
		return fmt.Errorf("rollout interrupted; every replica it started has stopped")
	}
	if err != nil {
		if errors.Is(err, rollout.ErrSetup) {
			return usageError{err}
		}
		return err
	}
	out := cmd.OutOrStdout()
	if format == "json" {
		err = rep.WriteJSON(out)
	} else {
		err = rep.WriteText(out)
	}
	if err != nil {
		return err
	}
	if htmlPath != "" {
		if err := rep.WriteHTMLFile(htmlPath); err != nil {
			return usageError{err}
		}
		fmt.Fprintln(stderr, "lameduck rollout: report written to", htmlPath)
	}
	if rep.Failed > 0 {
		return exitError{fmt.Errorf("%d of %d requests failed", rep.Failed, rep.Requests)}
	}
	return nil
}
