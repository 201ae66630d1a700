package config

import (
	"fmt"
	"strings"
	"testing"
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
