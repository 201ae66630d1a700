package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/postgres"
)

// WaitListening waits (up to 10 s) until a session on db's database has
// run LISTEN channel as its last statement and is idle: the LISTEN is
// committed, so a notification sent from then on reaches it. It is how a
// test knows that a listener started in the background is listening,
// where the listener's code gives no signal of its own.
func WaitListening(t testing.TB, db postgres.Conn, channel string) {
	t.Helper()
	WaitFor(t, 10*time.Second, "a session LISTENing on "+channel, func() bool {
		var listening bool
		Must(t, db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'idle' AND query = 'LISTEN ' || $1)`, channel).Scan(&listening))
		return listening
	})
}
