package testenv

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatewayBinary returns the path of a gateway's program: name on PATH, else
// fallback if it exists. Without one the test is skipped with hint, except
// in CI (CI=true), where a missing gateway fails it: `make test` installs
// the gateways when it runs as root.
func gatewayBinary(t testing.TB, name, fallback, hint string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	msg := name + " not found: " + hint
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startListening starts the process command returns for a free loopback
// address ("127.0.0.1:port") and waits until it listens there, trying
// another address when the port was taken in between (its output or
// logs() then say "address already in use"). The process is stopped by
// its PID when the test ends (stop, then SIGKILL after 5 s), and its
// output and logs() are shown if the test failed.
func startListening(t testing.TB, name string, command func(addr string) *exec.Cmd, stop os.Signal, logs func() string) string {
	t.Helper()
	for range 5 {
		addr := FreeAddr(t)
		p := StartProcess(t, name, command(addr), stop, 5*time.Second, logs)
		if waitListening(addr, p.Exited(), 10*time.Second) {
			return addr
		}
		select {
		case <-p.Exited():
		default:
			p.Kill()
		}
		text := p.Output() + logs()
		if !strings.Contains(strings.ToLower(text), "address already in use") {
			t.Fatalf("%s did not start:\n%s", name, text)
		}
	}
	t.Fatalf("%s: no free port after 5 tries", name)
	return ""
}

// fileText returns the contents of a log file, or "" if there is none.
func fileText(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// FreePort returns a loopback port that no one listened on a moment ago,
// and that it has not returned before in this process: the kernel may
// hand the same free port to two listens in a row, and a test that asks
// for several ports before starting what listens on them (a NATS
// cluster's routes) would then get one twice.
func FreePort(t testing.TB) int {
	t.Helper()
	givenPorts.Lock()
	defer givenPorts.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		Must(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !givenPorts.m[port] {
			givenPorts.m[port] = true
			return port
		}
	}
	t.Fatalf("no loopback port not given before after 100 tries")
	return 0
}

// givenPorts are the ports FreePort returned.
var givenPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// FreeAddr returns FreePort's address, "127.0.0.1:port".
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(FreePort(t))
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
