package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestRedisLingerBound: TOLLGATE_REDIS_LINGER counts against
// TOLLGATE_REDIS_TIMEOUT, so one above a quarter of the timeout is
// refused at start, naming both; up to a quarter is taken.
func TestRedisLingerBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vars     map[string]string
		refused  bool
		inEffect time.Duration
	}{
		{"off by default", nil, false, 0},
		{"a quarter of the default timeout", map[string]string{"TOLLGATE_REDIS_LINGER": "62500us"}, false, 62500 * time.Microsecond},
		{"above a quarter of the default timeout", map[string]string{"TOLLGATE_REDIS_LINGER": "63ms"}, true, 0},
		{"above the default timeout", map[string]string{"TOLLGATE_REDIS_LINGER": "300ms"}, true, 0},
		{"a quarter of a longer timeout", map[string]string{"TOLLGATE_REDIS_LINGER": "300ms", "TOLLGATE_REDIS_TIMEOUT": "1200ms"}, false, 300 * time.Millisecond},
		{"a shorter timeout", map[string]string{"TOLLGATE_REDIS_LINGER": "5ms", "TOLLGATE_REDIS_TIMEOUT": "10ms"}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := loadConfig(func(k string) string { return tc.vars[k] }, io.Discard)
			switch {
			case tc.refused && (err == nil || !strings.Contains(err.Error(), "TOLLGATE_REDIS_LINGER") || !strings.Contains(err.Error(), "TOLLGATE_REDIS_TIMEOUT")):
				t.Errorf("got %v, want an error naming TOLLGATE_REDIS_LINGER and TOLLGATE_REDIS_TIMEOUT", err)
			case !tc.refused && err != nil:
				t.Errorf("got %v, want no error", err)
			case !tc.refused && c.Linger != tc.inEffect:
				t.Errorf("got linger %v, want %v", c.Linger, tc.inEffect)
			}
		})
	}
}
