package exchange

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestDialUnreachable: a NATS server that cannot be reached at start is
// an error naming the setting.
func TestDialUnreachable(t *testing.T) {
	_, err := Dial(region.Config{Name: "eu", NATSURL: "nats://" + testenv.FreeAddr(t)}, 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_REGION_NATS_URL") {
		t.Errorf("got %v, want an error naming TOLLGATE_REGION_NATS_URL", err)
	}
}

// TestBed: three regions on loopback, their NATS servers one JetStream
// cluster through toxiproxy. A region's stream lives on its own server;
// a message it publishes reaches another region no sooner than the
// one-way delay; a region cut off keeps taking its own publishes, and
// the others read them once it is joined again.
func TestBed(t *testing.T) {
	const delay = 50 * time.Millisecond
	bed := testenv.StartRegions(t, delay, "us", "eu", "ap")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := map[string]jetstream.JetStream{}
	for _, r := range bed.Regions {
		nc, err := Dial(region.Config{Name: r.Name, NATSURL: r.NATSURL}, 5*time.Second)
		testenv.Must(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		testenv.Must(t, err)
		conn[r.Name] = js
	}
	// The cluster's meta leader is elected once the routes are up.
	var stream jetstream.Stream
	testenv.Eventually(t, time.Now(), 30*time.Second, "the stream of region ap", func() (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		stream, err = conn["ap"].CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BED_ap",
			Subjects: []string{"bed.ap.>"}, Placement: &jetstream.Placement{Tags: []string{"region:ap"}}})
		return err == nil, fmt.Sprint(err)
	})
	if got := stream.CachedInfo().Cluster.Leader; got != "ap" {
		t.Fatalf("stream placed on %s, want ap", got)
	}
	// A fetch made while ap is cut off waits in the partition and reaches
	// ap when it heals, after its client gave up: the message it takes
	// goes to nobody, and comes again after the acknowledgement wait
	// (docs/regions.md: why the exchange reads through push consumers).
	// A short wait keeps this test's read after the heal within its time.
	cons, err := conn["eu"].CreateOrUpdateConsumer(ctx, "BED_ap", jetstream.ConsumerConfig{Durable: "eu",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second})
	testenv.Must(t, err)
	start := time.Now()
	_, err = conn["ap"].Publish(ctx, "bed.ap.x", []byte("1"))
	testenv.Must(t, err)
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	testenv.Must(t, err)
	// eu's client reaches ap's stream over the route: one way and back.
	if took := time.Since(start); took < delay {
		t.Errorf("ap → eu took %v, want at least the delay %v", took, delay)
	}
	testenv.Must(t, msg.Ack())

	bed.Partition("ap")
	testenv.WaitFor(t, 10*time.Second, "ap's publish while cut off", func() bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := conn["ap"].Publish(ctx, "bed.ap.x", []byte("2"))
		return err == nil
	})
	if _, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond)); err == nil {
		t.Errorf("eu read ap's message while ap was cut off")
	}
	bed.Heal("ap")
	testenv.WaitFor(t, 30*time.Second, "eu reads ap's message after the partition", func() bool {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return false
		}
		_ = msg.Ack()
		return string(msg.Data()) == "2"
	})
	_ = nats.ErrTimeout
}
