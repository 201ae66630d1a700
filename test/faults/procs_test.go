package faults

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/testenv"
)

// buildBinaries builds cmd/api and cmd/admin (the latter with the
// "faults" tag, for the worker's hold-after-commit hook) into dir.
func buildBinaries(t *testing.T, dir string) (api, admin string) {
	t.Helper()
	api, admin = filepath.Join(dir, "api"), filepath.Join(dir, "admin")
	for _, b := range [][]string{
		{"-o", api, "github.com/tollgate/tollgate/cmd/api"},
		{"-tags", "faults", "-o", admin, "github.com/tollgate/tollgate/cmd/admin"},
	} {
		out, err := exec.Command("go", append([]string{"build"}, b...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %v: %v\n%s", b, err, out)
		}
	}
	return api, admin
}

// proc is a child process whose output goes to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // Wait's result, once exited is closed
}

func startProc(t *testing.T, name, logPath string, env []string, bin string, args ...string) *proc {
	t.Helper()
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL); <-p.exited })
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// terminate sends SIGTERM and returns the exit error (nil: exit 0), or
// fails the test if the process is still running after timeout.
func (p *proc) terminate(t *testing.T, timeout time.Duration) error {
	t.Helper()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		t.Errorf("%s still running %v after SIGTERM", p.name, timeout)
		p.kill()
		return p.err
	}
}

// logLines counts the lines the process has logged so far.
func (p *proc) logLines() int {
	data, _ := os.ReadFile(p.logPath)
	return bytes.Count(data, []byte("\n"))
}

// logSince returns the log's lines from line n on.
func (p *proc) logSince(n int) []string {
	data, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if n >= len(lines) {
		return nil
	}
	return lines[n:]
}

// postgresServer is a Postgres of the suite's own: initdb in a temporary
// directory, started and stopped with pg_ctl (as user postgres when we
// are root: Postgres refuses to run as root).
type postgresServer struct {
	bin, dir, port string
}

func pgBinDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TOLLGATE_TEST_PG_BIN"); d != "" {
		return d
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		t.Fatal("PostgreSQL server binaries (initdb, pg_ctl) not found; set TOLLGATE_TEST_PG_BIN")
	}
	return filepath.Dir(matches[len(matches)-1])
}

func asServerUser(name string, args ...string) *exec.Cmd {
	if os.Getuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func chownToServerUser(t *testing.T, path string) {
	t.Helper()
	if os.Getuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("running as root needs a user postgres to run Postgres as: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
}

func startPostgres(t *testing.T, dir string) *postgresServer {
	t.Helper()
	pg := &postgresServer{bin: pgBinDir(t), dir: dir, port: strconv.Itoa(testenv.FreePort(t))}
	for _, d := range []string{dir, pg.data(), filepath.Join(dir, "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		chownToServerUser(t, d)
	}
	out, err := asServerUser(filepath.Join(pg.bin, "initdb"), "-D", pg.data(), "-U", "tollgate", "--auth=trust",
		"-E", "UTF8", "--no-locale").CombinedOutput()
	if err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	pg.start(t)
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(pg.data(), "postmaster.pid")); err == nil {
			_ = pg.ctl("-m", "immediate", "-w", "stop")
		}
	})
	return pg
}

func (pg *postgresServer) data() string { return filepath.Join(pg.dir, "data") }

func (pg *postgresServer) url(db string) string {
	return "postgres://tollgate@127.0.0.1:" + pg.port + "/" + db + "?sslmode=disable"
}

func (pg *postgresServer) ctl(args ...string) error {
	out, err := asServerUser(filepath.Join(pg.bin, "pg_ctl"), append([]string{"-D", pg.data()}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v: %s", args, err, out)
	}
	return nil
}

func (pg *postgresServer) start(t *testing.T) {
	t.Helper()
	opts := fmt.Sprintf("-p %s -h 127.0.0.1 -k %s -c fsync=off -c max_connections=200", pg.port, filepath.Join(pg.dir, "run"))
	if err := pg.ctl("-l", filepath.Join(pg.dir, "run", "postgres.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		t.Fatal(err)
	}
}

// stopImmediate stops the server at once, without a checkpoint and
// without telling clients (pg_ctl stop -m immediate).
func (pg *postgresServer) stopImmediate(t *testing.T) {
	t.Helper()
	if err := pg.ctl("-m", "immediate", "-w", "stop"); err != nil {
		t.Fatal(err)
	}
}

// terminate sends SIGTERM to the postmaster's PID (a "smart" shutdown:
// it waits for sessions to end) and waits for it to exit.
func (pg *postgresServer) terminate(t *testing.T) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(pg.data(), "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("postgres (pid %d) stopping after SIGTERM", pid), func() bool {
		return syscall.Kill(pid, 0) != nil
	})
}

// redisServer is a redis-server of the suite's own, with an append-only
// file: Redis writes each change to it before answering, so a kill -9 of
// the process loses no acknowledged XADD (the kernel still holds what was
// written), and usage published before the kill is there after it. Only
// a crash of the machine would need appendfsync always or everysec.
type redisServer struct {
	dir  string
	port int
	p    *proc
}

func startRedis(t *testing.T, dir string) *redisServer {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &redisServer{dir: dir, port: testenv.FreePort(t)}
	r.start(t)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start starts the server and returns when it answers PING.
func (r *redisServer) start(t *testing.T) time.Time {
	t.Helper()
	r.p = startProc(t, "redis", filepath.Join(r.dir, "redis.out"), os.Environ(), "redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--dir", r.dir, "--daemonize", "no",
		"--save", "", "--appendonly", "yes", "--appendfsync", "no", "--logfile", filepath.Join(r.dir, "redis.log"))
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	var answered time.Time
	testenv.Eventually(t, time.Now(), 30*time.Second, "redis-server answering PING", func() (bool, string) {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			answered = time.Now()
			return true, ""
		}
		select {
		case <-r.p.exited:
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			t.Fatalf("redis-server exited: %v\n%s", r.p.err, log)
		default:
		}
		return false, err.Error()
	})
	return answered
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, p *proc, url string) {
	t.Helper()
	testenv.Eventually(t, time.Now(), 60*time.Second, p.name+": "+url+" answering 200", func() (bool, string) {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return true, ""
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, strings.Join(p.logSince(0), "\n"))
		default:
		}
		return false, "\n" + strings.Join(p.logSince(0), "\n")
	})
}

// scrape returns the sum of the samples of /metrics named name, or, when
// name holds a "{", of those whose line starts with it.
func scrape(addr, name string) (float64, error) { return testenv.ScrapeSum(addr, name) }
