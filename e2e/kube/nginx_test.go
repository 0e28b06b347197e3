package kube_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nginxConf is Debian's nginx as an ingress with `service-upstream` runs
// it: one upstream, the Service's ClusterIP, with a pool of keep-alive
// connections (HTTP/1.1, the Connection header cleared), nginx's default
// retries (`proxy_next_upstream error timeout`, never a POST that was
// sent) and its default timeouts.
const nginxConf = `user root;
worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	upstream service { server %[2]s; keepalive 32; }
	server {
		listen 127.0.0.1:%[3]d;
		location / {
			proxy_pass http://service;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
	}
}
`

// nginxProxy is a running nginx in front of a Service.
type nginxProxy struct {
	URL string // http://127.0.0.1:port, nginx's listener
	dir string
}

// startNginx runs Debian's nginx (installed with the cluster's packages)
// in front of upstream, a Service's URL (http://clusterIP:port), and
// returns when it answers 200 through the Service. nginx stops (SIGQUIT,
// its graceful stop) when the test ends.
func startNginx(t testing.TB, upstream string) *nginxProxy {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		t.Fatalf("nginx: %v (the cluster's `kubecluster up` installs Debian's nginx-light)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, strings.TrimPrefix(upstream, "http://"), port), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := startHostProcess(t, "nginx", dir, syscall.SIGQUIT, exec.Command(bin, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log")))
	p := &nginxProxy{URL: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir}
	c := &http.Client{Timeout: 2 * time.Second}
	waitUntil(t, 30*time.Second, "nginx proxying "+upstream, func() error {
		if err := proc.exitedErr(); err != nil {
			return err
		}
		resp, err := c.Get(p.URL + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("GET %s/: %s", p.URL, resp.Status)
		}
		return nil
	})
	return p
}

// errors returns nginx's error log lines about its upstream: why it
// answered 502 ("upstream prematurely closed connection", "reset by
// peer"), at most n of them.
func (p *nginxProxy) errors(n int) []string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "error.log"))
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "upstream") && len(out) < n {
			out = append(out, line)
		}
	}
	return out
}

// hostProcess is a program of the host's (nginx, socat) that a test runs
// beside the cluster.
type hostProcess struct {
	name   string
	out    string     // the file its output goes to
	exited chan error // Wait's result, put back by whoever reads it
}

// startHostProcess starts cmd in a process group of its own with its
// output in dir/<name>.log — a file, not a pipe: children inherit it, and
// a pipe would hold Wait until the last of them exits. When the test ends
// it sends stop to the process (nginx's SIGQUIT is its graceful stop),
// waits at most 10s, and then kills the whole group, children included.
func startHostProcess(t testing.TB, name, dir string, stop syscall.Signal, cmd *exec.Cmd) *hostProcess {
	t.Helper()
	out, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p := &hostProcess{name: name, out: out.Name(), exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(stop)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			t.Logf("%s: not stopped 10s after %v; killing its process group", name, stop)
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // children left behind
	})
	return p
}

// exitedErr is an error with the process's output when it has exited, or
// nil while it runs.
func (p *hostProcess) exitedErr() error {
	select {
	case err := <-p.exited:
		p.exited <- err
		b, _ := os.ReadFile(p.out)
		return fmt.Errorf("%s exited: %v: %s", p.name, err, b)
	default:
		return nil
	}
}
