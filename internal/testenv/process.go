package testenv

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// Process is a program a test runs until the test ends.
type Process struct {
	cmd    *exec.Cmd
	out    LogBuffer
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's error, once exited is closed
}

// StartProcess starts cmd with its output kept, and stops it by its PID
// when the test ends: stop, then SIGKILL after grace. If the test failed,
// name's output and what logs returns (nil for nothing more) are logged.
func StartProcess(t testing.TB, name string, cmd *exec.Cmd, stop os.Signal, grace time.Duration, logs func() string) *Process {
	t.Helper()
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	Must(t, cmd.Start())
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(stop)
		select {
		case <-p.exited:
		case <-time.After(grace):
			p.Kill()
		}
		if t.Failed() {
			more := ""
			if logs != nil {
				more = logs()
			}
			t.Logf("%s output:\n%s%s", name, p.Output(), more)
		}
	})
	return p
}

// Exited is closed once the process has exited; Err then says how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit error (nil for status 0), once it has exited.
func (p *Process) Err() error { return p.err }

// Output is what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// Kill kills the process and waits until it has exited.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Signal sends sig to the process (SIGSTOP and SIGCONT cut it off from
// everything and let it back, a partition of the process).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }
