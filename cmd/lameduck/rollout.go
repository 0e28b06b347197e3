package main

import (
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

func newRolloutCommand() *cobra.Command {
	o := rollout.Options{}
	var removal, format, report string
	cmd := &cobra.Command{
		Use:   "rollout [flags] -- COMMAND ARGS...",
		Short: "Run a server through simulated rolling restarts under load and count every failed request",
		Long: `Run COMMAND as --replicas replicas on loopback ports ({port} in any argument is
replaced by each replica's port), behind a load balancer that polls each
replica's readiness path like a readinessProbe, send open-loop load through it,
and restart every replica --rounds times the way a Deployment does (one surge
replica, none unavailable): the new one must be in rotation before the old one
gets SIGTERM. The balancer forgets a terminating replica after a delay drawn
from --removal-delay, asynchronously, as the endpoints controller and
kube-proxy do: a server that stops serving before then fails requests.

--mode l7 is an ingress (its own keep-alive pool per replica, no retries);
--mode l4 is kube-proxy (each client connection pinned to one replica).

Replicas get LAMEDUCK_ENV=kubernetes (unless set) so a lameduck server uses its
Kubernetes defaults, and PORT. The report counts requests, failures by kind
(status, refused, reset, EOF, timeout), requests the client re-sent, latency
percentiles and each replica's SIGTERM-to-exit time. Exit code: 0 when no
request failed, 1 when any did, 2 when the rollout could not run.

Example:
  lameduck rollout --report rollout.html -- lameduck demo --addr 127.0.0.1:{port}`,
		Args: cobra.MinimumNArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() < 0 && len(args) > 0 || cmd.ArgsLenAtDash() > 0 {
				return usageError{errors.New("write the command after --, such as: lameduck rollout -- lameduck demo --addr 127.0.0.1:{port}")}
			}
			o.Command = args
			if format != "text" && format != "json" {
				return usageError{fmt.Errorf("--format=%q: use text or json", format)}
			}
			min, max, err := parseRange(removal)
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
			return runRollout(cmd, o, format, report)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Replicas, "replicas", 3, "replicas kept serving")
	f.IntVar(&o.Rounds, "rounds", 2, "rolling restarts of every replica")
	f.StringVar(&o.Mode, "mode", rollout.ModeL7, "balancer: l7 (an ingress: keep-alive pool, no retries) or l4 (kube-proxy: connections pinned)")
	f.IntVar(&o.Rate, "rate", 200, "requests per second, open loop")
	f.StringVar(&o.GetPath, "get", "/", "path of the GET requests (empty: none)")
	f.StringVar(&o.PostPath, "post", "/echo", "path of the POST requests, every other request (empty: none)")
	f.StringVar(&o.ProbePath, "probe-path", "/readyz", "readiness path the balancer polls")
	f.DurationVar(&o.ProbePeriod, "probe-period", 2*time.Second, "readiness poll period (readinessProbe periodSeconds)")
	f.IntVar(&o.ProbeFailures, "probe-failures", 2, "consecutive failed polls that take a replica out (failureThreshold)")
	f.DurationVar(&o.ProbeTimeout, "probe-timeout", 3*time.Second, "readiness poll timeout (timeoutSeconds)")
	f.StringVar(&removal, "removal-delay", "1s-3s", "MIN-MAX: the balancer forgets a replica this long after its SIGTERM, drawn uniformly")
	f.DurationVar(&o.Grace, "grace", 45*time.Second, "SIGKILL a replica this long after SIGTERM (terminationGracePeriodSeconds)")
	f.DurationVar(&o.StopTimeout, "stop-timeout", 0, "the replicas left at the end get SIGTERM and this long to drain and exit before SIGKILL (default: --grace)")
	f.DurationVar(&o.StartTimeout, "start-timeout", 30*time.Second, "longest wait for a new replica to be ready")
	f.DurationVar(&o.Timeout, "timeout", 10*time.Second, "timeout of each request")
	f.DurationVar(&o.Warmup, "warmup", time.Second, "load before the first restart")
	f.DurationVar(&o.Cooldown, "cooldown", time.Second, "load after the last old replica exited")
	f.Uint64Var(&o.Rand, "rand", 0, "start the random removal delays from this number, to repeat a run (0: a random one; the report prints it)")
	f.StringArrayVar(&o.Env, "env", nil, "KEY=VALUE added to every replica's environment (repeatable)")
	f.StringVar(&o.LogDir, "logs", "", "keep each replica's output in DIR/replica-N.log")
	f.StringVar(&format, "format", "text", "report format on stdout: text or json")
	f.StringVar(&report, "report", "", "also write a self-contained HTML report with a timeline to FILE")
	return cmd
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

func runRollout(cmd *cobra.Command, o rollout.Options, format, htmlPath string) error {
	stderr := cmd.ErrOrStderr()
	o.Warn = func(s string) { fmt.Fprintln(stderr, "lameduck rollout:", s) }
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions(o.Replicas*o.Rounds,
			progressbar.OptionSetWriter(f),
			progressbar.OptionSetDescription("restarts"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		o.Progress = func(done, total, requests, failed int) {
			bar.Describe(fmt.Sprintf("restarts · %d requests · %d failed", requests, failed))
			_ = bar.Set(done)
		}
		defer bar.Exit()
	}
	// Ctrl-C or a SIGTERM to the tool stops the run and every replica it
	// started, instead of leaving them behind.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := rollout.Run(ctx, o)
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
