// Package exchange carries what each region admits on global rules to
// the other regions, over NATS JetStream (docs/regions.md, "The
// exchange"). It runs in the admin worker, one exchanger per region; the
// check server never links it.
package exchange

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tollgate/tollgate/internal/region"
)

// Dial connects to the region's NATS server (c.NATSURL). A server that
// cannot be reached is an error naming TOLLGATE_REGION_NATS_URL; once
// connected, the client reconnects by itself for as long as the process
// runs.
func Dial(c region.Config, timeout time.Duration) (*nats.Conn, error) {
	if c.NATSURL == "" {
		return nil, fmt.Errorf("TOLLGATE_REGION_NATS_URL: must name region %s's NATS server", c.Name)
	}
	nc, err := nats.Connect(c.NATSURL, nats.Name("tollgate-exchanger-"+c.Name), nats.Timeout(timeout),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("TOLLGATE_REGION_NATS_URL=%s: cannot reach region %s's NATS server: %w", c.NATSURL, c.Name, err)
	}
	return nc, nil
}
