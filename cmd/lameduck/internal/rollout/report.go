package rollout

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// Report is the outcome of a rollout. Its JSON form is what
// `lameduck rollout --format json` prints (docs/rollout.md shows it);
// times are seconds (float) from the start of the rollout, latencies
// milliseconds.
type Report struct {
	// Command is the local mode's command, or ["deployment/NAME"] on a
	// cluster.
	Command []string `json:"command"`
	// Mode is ModeL7, ModeL4, or ModeCluster.
	Mode string `json:"mode"`
	// Replicas is --replicas, or the Deployment's spec.replicas.
	Replicas int `json:"replicas"`
	Rounds   int `json:"rounds"`
	Rate     int `json:"rate"`
	// Rand is the number the removal delays were drawn from (--rand);
	// local mode only.
	Rand uint64 `json:"rand,omitzero"`
	// RemovalDelay is the range the endpoint-removal delays were drawn
	// from; local mode only.
	RemovalDelay [2]string `json:"removal_delay,omitzero"`
	// LoadSeconds is how long the load ran.
	LoadSeconds float64 `json:"load_seconds"`

	Requests  int `json:"requests"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// Failures counts failed requests by kind: every kind of Kinds, zero
	// included.
	Failures map[string]int `json:"failures"`
	// Resent counts requests the client's HTTP transport sent a second time
	// on a new connection after the first one broke (net/http does this for
	// idempotent requests); they are not failures, but a client that does
	// not retry would have failed them.
	Resent int `json:"resent"`
	// StatusCodes counts answers by HTTP status ("0": none).
	StatusCodes map[string]int `json:"status_codes"`
	// Latency of every request, failed ones included (vegeta's metrics).
	Latency Latency `json:"latency_ms"`

	// ReplicaReports is each replica's life (local mode).
	ReplicaReports []ReplicaReport `json:"replica_reports,omitempty"`
	// Cluster and Pods are set on a cluster: where it ran, each round,
	// and each pod of the Deployment with its timeline as the Kubernetes
	// API saw it.
	Cluster *Cluster    `json:"cluster,omitempty"`
	Pods    []PodReport `json:"pods,omitempty"`
	// FirstFailures holds, for each replica and failure kind, the first
	// failed request and how many failed alike (at most 20 entries),
	// earliest first.
	FirstFailures []Failure `json:"first_failures"`

	// samples are kept for the HTML report.
	samples []sample
	load    [2]float64
}

// Latency holds percentiles in milliseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// ReplicaReport is one replica's life. A time that did not happen is null.
type ReplicaReport struct {
	ID    int `json:"id"`
	Round int `json:"round"`
	Port  int `json:"port"`
	// Started: the process was started. Ready: first put in rotation.
	// Sigterm: SIGTERM sent. OutOfRotation: the balancer stopped routing to
	// it after SIGTERM (readiness or removal, whichever came first).
	// Removed: the endpoint-removal delay passed. Exited: the process ended.
	Started       *float64 `json:"started"`
	Ready         *float64 `json:"ready"`
	Sigterm       *float64 `json:"sigterm"`
	OutOfRotation *float64 `json:"out_of_rotation"`
	Removed       *float64 `json:"removed"`
	Exited        *float64 `json:"exited"`
	// SigtermToExit is Exited − Sigterm, in seconds.
	SigtermToExit *float64 `json:"sigterm_to_exit"`
	// Stopped: SIGTERM sent at the end of the run to a replica the
	// rollout did not restart (the last set), after the load; it had
	// --stop-timeout to exit. StopToExit is Exited − Stopped, in seconds.
	Stopped    *float64 `json:"stopped"`
	StopToExit *float64 `json:"stop_to_exit"`
	// ExitCode is the process's exit status, -1 when a signal ended it.
	ExitCode int `json:"exit_code"`
	// Killed: SIGKILLed at --grace after its SIGTERM, or at
	// --stop-timeout after its SIGTERM at the end.
	Killed   bool   `json:"killed"`
	Requests int    `json:"requests"`
	Failed   int    `json:"failed"`
	Log      string `json:"log,omitempty"`

	events []event
}

// Failure is the first failed request of one kind on one replica.
type Failure struct {
	At      float64 `json:"at"`
	Method  string  `json:"method"`
	Kind    string  `json:"kind"`
	Replica int     `json:"replica"`
	Error   string  `json:"error"`
	// Count is how many requests to that replica failed with that kind.
	Count int `json:"count"`
}

func secs(d time.Duration) float64 { return float64(d.Microseconds()) / 1e6 }
func ms(d time.Duration) float64   { return float64(d.Microseconds()) / 1e3 }

// report is the local mode's report: the load's numbers and each
// replica's life.
func (ro *rollout) report(samples []sample, m *vegeta.Metrics, rand0 uint64, loadStart, loadEnd time.Duration) *Report {
	rep, perReplica := loadReport(samples, m, loadStart, loadEnd)
	rep.Command, rep.Mode, rep.Replicas, rep.Rounds, rep.Rate, rep.Rand = ro.opt.Command, ro.opt.Mode, ro.opt.Replicas, ro.opt.Rounds, ro.opt.Rate, rand0
	rep.RemovalDelay = [2]string{ro.opt.RemovalMin.String(), ro.opt.RemovalMax.String()}
	ro.replicaReports(rep, perReplica)
	return rep
}

// loadReport counts the load's samples, the part of the report both modes
// share, and returns it with the requests and failures per replica
// (index 0 and 1; replica 0: unknown).
func loadReport(samples []sample, m *vegeta.Metrics, loadStart, loadEnd time.Duration) (*Report, map[int]*[2]int) {
	slices.SortFunc(samples, func(a, b sample) int { return int(a.At - b.At) })
	rep := &Report{
		LoadSeconds: secs(loadEnd - loadStart),
		Failures:    map[string]int{}, StatusCodes: m.StatusCodes,
		Latency: Latency{Mean: ms(m.Latencies.Mean), P50: ms(m.Latencies.P50), P90: ms(m.Latencies.P90),
			P99: ms(m.Latencies.P99), Max: ms(m.Latencies.Max)},
		samples: samples, load: [2]float64{secs(loadStart), secs(loadEnd)},
	}
	for _, k := range Kinds {
		rep.Failures[k] = 0
	}
	perReplica := map[int]*[2]int{}
	firstOf := map[[2]string]int{} // (replica, kind) → index in FirstFailures
	for _, s := range samples {
		rep.Requests++
		c := perReplica[s.Replica]
		if c == nil {
			c = new([2]int)
			perReplica[s.Replica] = c
		}
		c[0]++
		if s.Resent {
			rep.Resent++
		}
		if s.Kind == "" {
			rep.Succeeded++
			continue
		}
		c[1]++
		rep.Failed++
		rep.Failures[s.Kind]++
		key := [2]string{strconv.Itoa(s.Replica), s.Kind}
		if i, ok := firstOf[key]; ok {
			rep.FirstFailures[i].Count++
		} else if len(rep.FirstFailures) < 20 {
			firstOf[key] = len(rep.FirstFailures)
			rep.FirstFailures = append(rep.FirstFailures, Failure{At: secs(s.At), Method: s.Method, Kind: s.Kind, Replica: s.Replica, Error: s.Error, Count: 1})
		}
	}
	return rep, perReplica
}

// replicaReports adds each replica's life to rep.
func (ro *rollout) replicaReports(rep *Report, perReplica map[int]*[2]int) {
	ro.mu.Lock()
	replicas := slices.Clone(ro.replicas)
	ro.mu.Unlock()
	for _, r := range replicas {
		r.mu.Lock()
		rr := ReplicaReport{ID: r.id, Round: r.round, Port: r.port, ExitCode: r.exitCode, Killed: r.killed,
			events: slices.Clone(r.events)}
		r.mu.Unlock()
		if ro.opt.LogDir != "" {
			rr.Log = r.log
		}
		at := func(what string, after *float64) *float64 {
			for _, e := range rr.events {
				if e.What == what && (after == nil || secs(e.At) >= *after) {
					v := secs(e.At)
					return &v
				}
			}
			return nil
		}
		rr.Started, rr.Ready, rr.Sigterm = at(evStarted, nil), at(evIn, nil), at(evSigterm, nil)
		rr.Removed, rr.Exited = at(evRemoved, nil), at(evExited, nil)
		if rr.Sigterm != nil {
			rr.OutOfRotation = at(evOut, rr.Sigterm)
			if rr.Exited != nil {
				v := *rr.Exited - *rr.Sigterm
				rr.SigtermToExit = &v
			}
		}
		if rr.Stopped = at(evStop, nil); rr.Stopped != nil && rr.Exited != nil {
			v := *rr.Exited - *rr.Stopped
			rr.StopToExit = &v
		}
		if c := perReplica[r.id]; c != nil {
			rr.Requests, rr.Failed = c[0], c[1]
		}
		rep.ReplicaReports = append(rep.ReplicaReports, rr)
	}
}

// WriteJSON writes the report as one indented JSON object.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes the report for a person.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	if c := rep.Cluster; c != nil {
		fmt.Fprintf(&b, "lameduck rollout: deployment/%s in namespace %s (context %s, %s)\n", c.Deployment, c.Namespace, c.Context, c.Server)
		fmt.Fprintf(&b, "  %d replicas (%s, grace %ds) × %d rounds (kubectl rollout restart), %d req/s to %s for %.1fs\n",
			rep.Replicas, c.Strategy, c.GraceSeconds, rep.Rounds, rep.Rate, c.URL, rep.LoadSeconds)
	} else {
		fmt.Fprintf(&b, "lameduck rollout: %s\n", strings.Join(rep.Command, " "))
		fmt.Fprintf(&b, "  %d replicas × %d rounds (%d restarts), %s balancer, %d req/s for %.1fs, endpoint removal %s–%s after SIGTERM (--rand %d)\n",
			rep.Replicas, rep.Rounds, rep.Replicas*rep.Rounds, strings.ToUpper(rep.Mode), rep.Rate, rep.LoadSeconds,
			rep.RemovalDelay[0], rep.RemovalDelay[1], rep.Rand)
	}
	fmt.Fprintf(&b, "requests   %d   succeeded %d   failed %d\n", rep.Requests, rep.Succeeded, rep.Failed)
	kinds := make([]string, 0, len(Kinds))
	for _, k := range Kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, rep.Failures[k]))
	}
	fmt.Fprintf(&b, "failures   %s\n", strings.Join(kinds, " · "))
	fmt.Fprintf(&b, "re-sent    %d (sent again by the client's transport on a new connection)\n", rep.Resent)
	codes := make([]string, 0, len(rep.StatusCodes))
	for c, n := range rep.StatusCodes {
		codes = append(codes, fmt.Sprintf("%s×%d", c, n))
	}
	slices.Sort(codes)
	fmt.Fprintf(&b, "statuses   %s\n", strings.Join(codes, " "))
	fmt.Fprintf(&b, "latency    mean %s  p50 %s  p90 %s  p99 %s  max %s\n",
		fmtMS(rep.Latency.Mean), fmtMS(rep.Latency.P50), fmtMS(rep.Latency.P90), fmtMS(rep.Latency.P99), fmtMS(rep.Latency.Max))
	if rep.Cluster != nil {
		rep.writeClusterText(&b)
	} else {
		rep.writeReplicaText(&b)
	}
	if len(rep.FirstFailures) > 0 {
		if rep.Cluster != nil {
			// Behind a Service, the client does not know which pod failed.
			b.WriteString("failures by kind (the first one, and how many)\n")
		} else {
			b.WriteString("failures by replica and kind (the first one, and how many)\n")
		}
		for _, f := range rep.FirstFailures {
			who := fmt.Sprintf("replica %d  ", f.Replica)
			if rep.Cluster != nil {
				who = ""
			}
			fmt.Fprintf(&b, "  %7.3fs  %s%-8s ×%-5d first: %s %s\n", f.At, who, f.Kind, f.Count, f.Method, f.Error)
		}
		fmt.Fprintf(&b, "FAIL: %d of %d requests failed\n", rep.Failed, rep.Requests)
	} else {
		fmt.Fprintf(&b, "PASS: none of %d requests failed\n", rep.Requests)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeReplicaText writes the local mode's table of replicas.
func (rep *Report) writeReplicaText(b *strings.Builder) {
	b.WriteString("replicas (seconds from the start)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  id\tround\tready\tSIGTERM\tout of LB\texited\tSIGTERM→exit\texit\trequests\tfailed")
	for _, r := range rep.ReplicaReports {
		code := strconv.Itoa(r.ExitCode)
		if r.Killed {
			code = "SIGKILL"
		}
		sigterm, toExit := fmtSec(r.Sigterm), fmtSec(r.SigtermToExit)
		if r.Sigterm == nil && r.Stopped != nil {
			sigterm, toExit = fmtSec(r.Stopped)+" (end)", fmtSec(r.StopToExit)
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", r.ID, r.Round, fmtSec(r.Ready), sigterm,
			fmtSec(r.OutOfRotation), fmtSec(r.Exited), toExit, code, r.Requests, r.Failed)
	}
	_ = tw.Flush()
}

func fmtSec(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fs", *v)
}

func fmtMS(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2fs", v/1000)
	}
	return fmt.Sprintf("%.1fms", v)
}
