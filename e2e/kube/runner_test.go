package kube_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRunnerRollingRestartsDoEveryJobOnce: the chart's runner (`lameduck
// demo-worker`) consuming from a NATS JetStream server inside the cluster,
// restarted twice while jobs run, in both drain modes: every job enqueued
// is done, and done exactly once (a job interrupted by the drain is handed
// back and done once by another runner).
func TestRunnerRollingRestartsDoEveryJobOnce(t *testing.T) {
	needCluster(t)
	bin := lameduckBin(t)
	for _, mode := range []string{"complete", "interrupt"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // two namespaces, two NATS servers: nothing shared
			e := newEnv(t, "runner-"+mode)
			body, err := os.ReadFile(filepath.Join("testdata", "nats.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			e.kubectl(body, "apply", "-f", "-")
			e.waitRolledOut("nats", 2*time.Minute)
			svc, err := e.cs.CoreV1().Services(e.ns).Get(t.Context(), "nats", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			natsURL := fmt.Sprintf("nats://%s:4222", svc.Spec.ClusterIP)
			logs := e.followLogs("worker")
			e.helmInstall("lameduck-demo", map[string]any{
				"replicaCount": 1,
				"worker": map[string]any{"enabled": true, "replicaCount": 2, "nats": natsURL, "drainMode": mode,
					// a bound well inside the test's time, and the grace derived from it
					"drainTimeoutSeconds": 60, "checkpointMarginSeconds": 15},
			})
			ids := enqueueJobs(t, bin, natsURL, 60, time.Second)
			time.Sleep(3 * time.Second) // jobs in flight before the first restart
			for i := range 2 {
				start := time.Now()
				e.restart("lameduck-demo-worker")
				e.waitRolledOut("lameduck-demo-worker", 4*time.Minute)
				t.Logf("round %d: rolled out, old runners gone, in %.1fs", i+1, time.Since(start).Seconds())
			}
			waitUntil(t, 3*time.Minute, "every job done", func() error {
				done := logs.jobsDone()
				for _, id := range ids {
					if done[id] == 0 {
						return fmt.Errorf("job %s not done yet (%d of %d done)", id, len(done), len(ids))
					}
				}
				return nil
			})
			done := logs.jobsDone()
			twice := 0
			for _, id := range ids {
				if done[id] != 1 {
					twice++
					t.Errorf("job %s done %d times, want exactly once", id, done[id])
				}
			}
			t.Logf("%s: %d jobs, each done once: %v; handed back: %d", mode, len(ids), twice == 0, logs.handedBack())
		})
	}
}

func enqueueJobs(t *testing.T, bin, natsURL string, n int, d time.Duration) []string {
	t.Helper()
	out, err := exec.Command(bin, "demo-worker", "enqueue", "--nats", natsURL, "--n", fmt.Sprint(n), "--d", d.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("enqueue: %v\n%s", err, out)
	}
	// "... (ids job-B-0001 to job-B-0060)"
	_, rest, ok := strings.Cut(string(out), "(ids ")
	first, _, ok2 := strings.Cut(rest, " to ")
	if !ok || !ok2 {
		t.Fatalf("enqueue said %q", out)
	}
	prefix := strings.TrimSuffix(first, "0001")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i+1)
	}
	return ids
}

// podLogs follows the logs of one container in every pod of the namespace
// from its start, so the lines of a pod deleted since are kept.
type podLogs struct {
	mu    sync.Mutex
	lines []map[string]any
	seen  map[string]bool
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

func (e *env) followLogs(container string) *podLogs {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pl := &podLogs{seen: map[string]bool{}, stop: cancel}
	w, err := e.cs.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	pl.wg.Add(1)
	go func() {
		defer pl.wg.Done()
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name != container || (cs.State.Running == nil && cs.State.Terminated == nil) {
					continue
				}
				key := fmt.Sprintf("%s/%d", p.Name, cs.RestartCount)
				pl.mu.Lock()
				fresh := !pl.seen[key]
				pl.seen[key] = true
				pl.mu.Unlock()
				if fresh {
					pl.wg.Add(1)
					go pl.follow(ctx, e, p.Name, container)
				}
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); pl.wg.Wait() })
	return pl
}

func (pl *podLogs) follow(ctx context.Context, e *env, pod, container string) {
	defer pl.wg.Done()
	rc, err := e.cs.CoreV1().Pods(e.ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true}).Stream(ctx)
	if err != nil {
		return
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil {
			rec["pod"] = pod
			pl.mu.Lock()
			pl.lines = append(pl.lines, rec)
			pl.mu.Unlock()
		}
	}
}

// jobsDone counts "job done" lines per job id.
func (pl *podLogs) jobsDone() map[string]int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	done := map[string]int{}
	for _, r := range pl.lines {
		if r["msg"] == "demo-worker: job done" {
			if id, _ := r["job"].(string); id != "" {
				done[id]++
			}
		}
	}
	return done
}

// handedBack counts the jobs runners gave back to the broker.
func (pl *podLogs) handedBack() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	n := 0
	for _, r := range pl.lines {
		if m, _ := r["msg"].(string); strings.HasPrefix(m, "lameduck: worker: job handed back") {
			n++
		}
	}
	return n
}
