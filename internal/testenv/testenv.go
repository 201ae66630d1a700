// Package testenv gives tests their own real Postgres database and Redis key
// space on the servers `make test` starts (scripts/services.sh). A test
// never shares state with another: each gets a fresh migrated database and
// a unique Redis key prefix, removed in t.Cleanup.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
)

// missingOnce prints the skip notice once per test binary, so a plain
// `go test ./...` says in one line per package why most tests skipped.
var missingOnce sync.Once

// need returns the setting name that `make test` (scripts/services.sh
// test) sets for the servers it starts. Without it a test is skipped, with
// one line naming `make test`; under CI=true, where the servers must be
// there, it fails instead.
func need(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	msg := fmt.Sprintf("%s is not set: this test needs the Postgres and Redis that `make test` starts", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	missingOnce.Do(func() { fmt.Fprintln(os.Stderr, "testenv: skipping the tests that need servers; "+msg) })
	t.Skip(msg)
	return ""
}

var (
	templateOnce sync.Once
	templateErr  error
)

const templateDB = "tollgate_template"

// DatabaseURL creates a fresh database migrated to the current schema and
// returns its URL. The database is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	base := need(t, "TOLLGATE_TEST_DATABASE_URL")
	ctx := context.Background()
	templateOnce.Do(func() { templateErr = makeTemplate(ctx, base) })
	if templateErr != nil {
		t.Fatalf("testenv: template database: %v", templateErr)
	}
	name := "t_" + RandomID(8)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+templateDB); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDatabase(base, name)
}

// DB returns a pool on a fresh migrated database (see DatabaseURL).
func DB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := DatabaseURL(t)
	pool, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func makeTemplate(ctx context.Context, base string) error {
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	// Several test binaries run at once; only one may build the template.
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock(727274)"); err != nil {
		return err
	}
	defer admin.Exec(ctx, "SELECT pg_advisory_unlock(727274)") //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", templateDB).Scan(&exists); err != nil {
		return err
	}
	if exists {
		pool, err := postgres.Open(ctx, withDatabase(base, templateDB))
		if err != nil {
			return err
		}
		v, dirty, err := postgres.Version(ctx, pool)
		pool.Close()
		if err == nil && !dirty && v == postgres.SchemaVersion() {
			return nil
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE "+templateDB+" WITH (FORCE)"); err != nil {
			return err
		}
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+templateDB); err != nil {
		return err
	}
	pool, err := postgres.Open(ctx, withDatabase(base, templateDB))
	if err != nil {
		return err
	}
	defer pool.Close()
	return postgres.MigrateUp(pool)
}

func withDatabase(url, name string) string {
	i := strings.LastIndex(url, "/")
	q := ""
	if j := strings.Index(url[i:], "?"); j >= 0 {
		q = url[i+j:]
	}
	return url[:i+1] + name + q
}

// RandomID returns n random bytes as lowercase hex.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RedisAddr returns the single Redis server's address.
func RedisAddr(t testing.TB) string { t.Helper(); return need(t, "TOLLGATE_TEST_REDIS_ADDR") }

// RedisClusterAddrs returns the seed addresses of the 3-master test cluster.
func RedisClusterAddrs(t testing.TB) []string {
	t.Helper()
	return strings.Split(need(t, "TOLLGATE_TEST_REDIS_CLUSTER_ADDRS"), ",")
}

// Redis returns a client of the single test Redis and a key prefix unique
// to the test; keys under the prefix are deleted when the test ends. The
// server is shared with every test running at the time, in every
// package: a test that empties a server (SCRIPT FLUSH, FLUSHALL,
// FLUSHDB) uses one of its own instead (StartRedisServer,
// StartRedisCluster).
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: RedisAddr(t)})
	return c, cleanedPrefix(t, c, func(ctx context.Context, prefix string) {
		deleteByPrefix(ctx, c, prefix)
	})
}

// RedisCluster returns a client of the test cluster and a unique prefix.
// Like Redis's server it is shared: no test may flush it.
func RedisCluster(t testing.TB) (*redis.ClusterClient, string) {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: RedisClusterAddrs(t)})
	return c, cleanedPrefix(t, c, func(ctx context.Context, prefix string) {
		_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			deleteByPrefix(ctx, m, prefix)
			return nil
		})
	})
}

// RedisTopology is one shape of test Redis a test runs against: a
// client of it and a key prefix unique to the test, under a name for the
// subtest.
type RedisTopology struct {
	Name   string
	Client redis.UniversalClient
	Prefix string
}

// RedisTopologies returns the single test Redis (Redis) and the test
// cluster (RedisCluster), named "single" and "cluster", for a test that
// must hold on both.
func RedisTopologies(t testing.TB) []RedisTopology {
	t.Helper()
	single, singlePrefix := Redis(t)
	cluster, clusterPrefix := RedisCluster(t)
	return []RedisTopology{{"single", single, singlePrefix}, {"cluster", cluster, clusterPrefix}}
}

// cleanedPrefix returns a key prefix unique to the test; when the test
// ends, deleteAll removes the keys under it (within 5 seconds) and c is
// closed.
func cleanedPrefix(t testing.TB, c io.Closer, deleteAll func(ctx context.Context, prefix string)) string {
	prefix := "t" + RandomID(6) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		deleteAll(ctx, prefix)
		c.Close()
	})
	return prefix
}

func deleteByPrefix(ctx context.Context, c *redis.Client, prefix string) {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(fmt.Sprint(err))
	}
}

// SecretKey is the TOLLGATE_SECRET_KEY tests run with (32 bytes, base64):
// it seals the signing keys of the test databases.
const SecretKey = "dG9sbGdhdGUtdGVzdC1zZWNyZXQta2V5LTMyYnl0ZXM="

// Fields returns the fields a validation error names: err's
// *tollgate.Error's Fields, nil for any other error.
func Fields(err error) map[string]string {
	var e *tollgate.Error
	if errors.As(err, &e) {
		return e.Fields
	}
	return nil
}
