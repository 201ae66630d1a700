package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/postgres"
)

// Postgres is a throwaway Postgres server of one test's own, for tests
// that stop and start it: the shared server must stay up for the tests
// running beside them. It needs TOLLGATE_TEST_PG_BIN (set by `make test`);
// as root the server runs as user postgres.
type Postgres struct {
	// URL is a migrated database on the server.
	URL string
	t   testing.TB
	bin string
	dir string
	// port and socket directory, fixed for restarts.
	port string
}

// OwnPostgres initialises and starts a server on a free port, creates a
// migrated database, and removes it all when the test ends.
func OwnPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin := need(t, "TOLLGATE_TEST_PG_BIN")
	dir, err := os.MkdirTemp(os.Getenv("TOLLGATE_TEST_WORK"), "ownpg-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p := &Postgres{t: t, bin: bin, dir: dir}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			_ = p.pgCtl("-m", "immediate", "-w", "stop")
		}
		os.RemoveAll(dir)
	})
	for _, d := range []string{dir, filepath.Join(dir, "data"), filepath.Join(dir, "sock")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		p.chown(d)
	}
	if out, err := p.asServerUser(filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", "tollgate",
		"--auth=trust", "-E", "UTF8", "--no-locale").CombinedOutput(); err != nil {
		t.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	p.port = strconv.Itoa(FreePort(t))
	p.Start()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, "postgres://tollgate@127.0.0.1:"+p.port+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE tollgate"); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p.URL = "postgres://tollgate@127.0.0.1:" + p.port + "/tollgate?sslmode=disable"
	pool, err := postgres.Open(ctx, p.URL)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer pool.Close()
	if err := postgres.MigrateUp(pool); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// Start starts the server (again) and waits until it accepts connections.
func (p *Postgres) Start() {
	p.t.Helper()
	opts := fmt.Sprintf("-p %s -h 127.0.0.1 -k %s -c fsync=off", p.port, filepath.Join(p.dir, "sock"))
	if err := p.pgCtl("-l", filepath.Join(p.dir, "sock", "postgres.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		p.t.Fatalf("testenv: start postgres: %v", err)
	}
}

// Stop stops the server (fast shutdown: sessions are disconnected).
func (p *Postgres) Stop() {
	p.t.Helper()
	if err := p.pgCtl("-m", "fast", "-w", "stop"); err != nil {
		p.t.Fatalf("testenv: stop postgres: %v", err)
	}
}

func (p *Postgres) pgCtl(args ...string) error {
	args = append([]string{"-D", filepath.Join(p.dir, "data")}, args...)
	out, err := p.asServerUser(filepath.Join(p.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// asServerUser runs a server program as user postgres when we are root
// (Postgres refuses to run as root).
func (p *Postgres) asServerUser(name string, args ...string) *exec.Cmd {
	if os.Getuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func (p *Postgres) chown(path string) {
	if os.Getuid() != 0 {
		return
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		p.t.Fatalf("testenv: user postgres: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(path, uid, gid); err != nil {
		p.t.Fatalf("testenv: %v", err)
	}
}
