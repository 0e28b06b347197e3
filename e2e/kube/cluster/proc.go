package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// start runs one component detached from the caller (its own session, so it
// outlives the command that started it), at the given nice level, with its
// output in Logs()/<name>.log and its pid in pids/<name>.pid.
func (cfg Config) start(name string, nice int, path string, args ...string) error {
	if cfg.running(name) {
		cfg.Logf("%s already running", name)
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(cfg.Logs(), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nice", append([]string{"-n", strconv.Itoa(nice), path}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kube: starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release()
	return os.WriteFile(filepath.Join(cfg.pids(), name+".pid"), []byte(strconv.Itoa(pid)), 0o644)
}

// pid is the recorded pid of a component, or 0.
func (cfg Config) pid(name string) int {
	b, err := os.ReadFile(filepath.Join(cfg.pids(), name+".pid"))
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return p
}

// running reports whether the recorded pid of name is alive and still runs
// that binary (nice execs it under the same pid), so a stale pid file can
// never point Down at another process.
func (cfg Config) running(name string) bool {
	p := cfg.pid(name)
	if p <= 0 || syscall.Kill(p, 0) != nil {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p))
	if err != nil {
		return false
	}
	base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
	return base == name || base == "nice"
}

// stop sends SIGTERM to a running component, waits up to 15s, then SIGKILL.
func (cfg Config) stop(name string) {
	defer os.Remove(filepath.Join(cfg.pids(), name+".pid"))
	if !cfg.running(name) {
		return
	}
	p := cfg.pid(name)
	syscall.Kill(p, syscall.SIGTERM)
	for range 60 {
		if syscall.Kill(p, 0) != nil {
			cfg.Logf("stopped %s (pid %d)", name, p)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	cfg.Logf("%s (pid %d) ignored SIGTERM for 15s: SIGKILL", name, p)
	syscall.Kill(p, syscall.SIGKILL)
}

// waitFor polls ready every 250ms for up to limit, failing early (with the
// tail of its log) if the component died.
func (cfg Config) waitFor(ctx context.Context, name string, limit time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		if !cfg.running(name) {
			return fmt.Errorf("kube: %s exited; the end of its log:\n%s", name, cfg.logTail(name, 30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube: %s not ready after %s (%v); the end of its log:\n%s", name, limit, last, cfg.logTail(name, 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// logTail is the last n lines of a component's log.
func (cfg Config) logTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(cfg.Logs(), name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// run runs a host command and returns its combined output on failure.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func output(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	return strings.TrimSpace(string(out)), err
}
