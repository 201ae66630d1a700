package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRedisSentinel: sentinels need the primary's name and exclude a
// Cluster, each refusal naming the setting to fix; set properly, the
// client is a failover client of that primary.
func TestRedisSentinel(t *testing.T) {
	env := func(vars map[string]string) *Env { return New(func(k string) string { return vars[k] }) }
	for _, tc := range []struct {
		vars  map[string]string
		field string
	}{
		{map[string]string{"TOLLGATE_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379"}, "TOLLGATE_REDIS_SENTINEL_MASTER"},
		{map[string]string{"TOLLGATE_REDIS_SENTINEL_MASTER": "tollgate"}, "TOLLGATE_REDIS_SENTINEL_ADDRS"},
		{map[string]string{"TOLLGATE_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379", "TOLLGATE_REDIS_SENTINEL_MASTER": "tollgate",
			"TOLLGATE_REDIS_CLUSTER_ADDRS": "127.0.0.1:7000"}, "TOLLGATE_REDIS_SENTINEL_ADDRS"},
	} {
		e := env(tc.vars)
		e.Redis("127.0.0.1:6379")
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: got %v, want an error naming %s", tc.vars, err, tc.field)
		}
	}
	e := env(map[string]string{"TOLLGATE_REDIS_SENTINEL_ADDRS": "127.0.0.1:26379, 127.0.0.1:26380", "TOLLGATE_REDIS_SENTINEL_MASTER": "tollgate"})
	r := e.Redis("127.0.0.1:6379")
	if err := e.Err(); err != nil {
		t.Fatal(err)
	}
	if !r.Configured() || len(r.Sentinels) != 2 || r.Master != "tollgate" {
		t.Errorf("got %+v", r)
	}
	c := r.Client()
	defer c.Close()
	if got := fmt.Sprint(c); !strings.Contains(got, "FailoverClient") {
		t.Errorf("client %s is not a failover client", got)
	}
}

// TestRedisWait: the wait for replicas is off by default, bounded by
// 50ms when on, and its bound must be whole milliseconds shorter than
// TOLLGATE_REDIS_TIMEOUT; each refusal names the setting to fix.
func TestRedisWait(t *testing.T) {
	env := func(vars map[string]string) *Env { return New(func(k string) string { return vars[k] }) }
	e := env(nil)
	r := e.Redis("127.0.0.1:6379")
	if err := e.Err(); err != nil || r.WaitReplicas != 0 || r.WaitTimeout != 50*time.Millisecond {
		t.Errorf("defaults: %d replicas, %v (%v); want 0, 50ms", r.WaitReplicas, r.WaitTimeout, err)
	}
	e = env(map[string]string{"TOLLGATE_REDIS_WAIT_REPLICAS": "2", "TOLLGATE_REDIS_WAIT_TIMEOUT": "120ms"})
	r = e.Redis("127.0.0.1:6379")
	if err := e.Err(); err != nil || r.WaitReplicas != 2 || r.WaitTimeout != 120*time.Millisecond {
		t.Errorf("set: %d replicas, %v (%v); want 2, 120ms", r.WaitReplicas, r.WaitTimeout, err)
	}
	for _, tc := range []struct {
		vars  map[string]string
		field string
	}{
		{map[string]string{"TOLLGATE_REDIS_WAIT_REPLICAS": "-1"}, "TOLLGATE_REDIS_WAIT_REPLICAS"},
		{map[string]string{"TOLLGATE_REDIS_WAIT_REPLICAS": "one"}, "TOLLGATE_REDIS_WAIT_REPLICAS"},
		{map[string]string{"TOLLGATE_REDIS_WAIT_TIMEOUT": "0s"}, "TOLLGATE_REDIS_WAIT_TIMEOUT"},
		{map[string]string{"TOLLGATE_REDIS_WAIT_TIMEOUT": "1500us"}, "TOLLGATE_REDIS_WAIT_TIMEOUT"},
		{map[string]string{"TOLLGATE_REDIS_WAIT_REPLICAS": "1", "TOLLGATE_REDIS_WAIT_TIMEOUT": "250ms"}, "TOLLGATE_REDIS_WAIT_TIMEOUT"},
		{map[string]string{"TOLLGATE_REDIS_WAIT_REPLICAS": "1", "TOLLGATE_REDIS_TIMEOUT": "40ms"}, "TOLLGATE_REDIS_WAIT_TIMEOUT"},
	} {
		e := env(tc.vars)
		e.Redis("127.0.0.1:6379")
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%v: got %v, want an error naming %s", tc.vars, err, tc.field)
		}
	}
	// Off, a short Redis timeout needs no shorter wait.
	e = env(map[string]string{"TOLLGATE_REDIS_TIMEOUT": "20ms"})
	e.Redis("127.0.0.1:6379")
	if err := e.Err(); err != nil {
		t.Errorf("TOLLGATE_REDIS_TIMEOUT=20ms without a wait: %v", err)
	}
}
