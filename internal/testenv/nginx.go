package testenv

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// NginxBinary returns the path of nginx. Without one the test is skipped
// with a message saying what to install, except in CI (CI=true), where a
// missing nginx fails it: `make test` installs Debian's nginx-light when
// it runs as root.
func NginxBinary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	const msg = "nginx not found: install Debian's nginx-light (`make test` does, as root) to run the gateway tests"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// Nginx runs nginx in the foreground with its configuration, pid file,
// logs and temporary files in dir, listening on a free loopback port, and
// returns that address ("127.0.0.1:port"). http returns the body of the
// http block for the listen address it is given (e.g. "listen 127.0.0.1:
// 41234;" belongs in its server block); include paths in it are relative
// to dir. nginx stops when the test ends, and its error log is shown if
// the test failed.
func Nginx(t testing.TB, dir string, http func(listen string) string) string {
	t.Helper()
	bin := NginxBinary(t)
	for range 5 {
		addr := freeLoopbackAddr(t)
		conf := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
%[2]s
}
`, dir, http(addr))
		confPath := filepath.Join(dir, "nginx.conf")
		Must(t, os.WriteFile(confPath, []byte(conf), 0o600))
		var out syncWriter
		cmd := exec.Command(bin, "-p", dir+"/", "-c", confPath, "-e", filepath.Join(dir, "error.log"))
		cmd.Stdout, cmd.Stderr = &out, &out
		Must(t, cmd.Start())
		exited := make(chan struct{}) // closed when nginx has exited
		go func() { _ = cmd.Wait(); close(exited) }()
		if waitListening(addr, exited, 10*time.Second) {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-exited:
				case <-time.After(5 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
					t.Logf("nginx error log:\n%s%s", out.String(), logs)
				}
			})
			return addr
		}
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		if !strings.Contains(out.String()+string(logs), "Address already in use") {
			t.Fatalf("nginx did not start:\n%s%s", out.String(), logs)
		}
		// Another process took the port between our check and nginx's
		// bind: try another.
	}
	t.Fatal("nginx: no free port after 5 tries")
	return ""
}

// freeLoopbackAddr returns a loopback address whose port was free a
// moment ago.
func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Must(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	return "127.0.0.1:" + strconv.Itoa(addr.Port)
}

// waitListening waits until addr accepts connections, the process exits
// or the timeout passes.
func waitListening(addr string, exited <-chan struct{}, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// syncWriter is a buffer safe for a process's stdout and stderr at once.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
