package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// journalAt is the checks' time in the journal tests, and journalMinute
// its minute's start (s).
const (
	journalAt      = int64(1_800_000_030_000_000)
	journalMinute  = "1800000000"
	journalMinuteS = int64(1_800_000_000)
)

// readJournal returns the journal at jkey as metering reads it.
func readJournal(t *testing.T, client redis.Cmdable, jkey string) (rows map[metering.JournalRow]metering.Counts, holds map[string]string) {
	t.Helper()
	raw, err := client.Get(context.Background(), jkey).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	rows, holds, err = metering.ParseJournal(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rows, holds
}

// journalCounts returns the units and decisions the journal at jkey
// holds for row in journalMinute.
func journalCounts(t *testing.T, client redis.Cmdable, jkey, row string) (units, decisions int64) {
	t.Helper()
	rows, _ := readJournal(t, client, jkey)
	c := rows[metering.JournalRow{Row: row, Minute: journalMinuteS}]
	return c.AllowedUnits, c.Allowed
}

// TestJournalRecordsAdmittedUsage: every check script (check.lua, lean.lua
// and lean1.lua) adds an admitted check's units and decision to its hash
// tag's journal, in the same call, and says so in Outcome.Recorded; a
// denial, a dry run and a check without a row add nothing. A shadow rule's
// denial admits, and so records.
func TestJournalRecordsAdmittedUsage(t *testing.T) {
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 5, PeriodUS: limiter.HourUS}
	month := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth}
	slide := limiter.Params{Algorithm: limiter.SlidingWindowLog, Limit: 1000, PeriodUS: limiter.HourUS}
	for _, c := range testenv.RedisTopologies(t) {
		for _, path := range []struct {
			name   string
			noLean bool
			extra  *limiter.Params // a second rule of the check
		}{{"lean1", false, nil}, {"lean", false, &month}, {"check.lua", true, nil}, {"check.lua log", false, &slide}} {
			t.Run(c.Name+"/"+path.name, func(t *testing.T) {
				ctx := context.Background()
				s := New(c.Client)
				s.NoLean = path.noLean
				tag := "j" + path.name[:2]
				key := c.Prefix + "{" + tag[:1] + "}" + path.name
				jkey := statekey.JournalKeyOf(key)
				row := statekey.UsageRow("tenant-"+path.name, "key", "authenticated", "/v1/items/{id}")
				entry := statekey.UsageEntry("tenant-"+path.name, "key", "authenticated", "/v1/items/{id}")
				reqs := []limiter.Request{{Key: key, Params: gcra}}
				if path.extra != nil {
					reqs = append(reqs, limiter.Request{Key: key + "2", Params: *path.extra})
				}
				check := func(cost int64, dry bool, usage string) limiter.Outcome {
					t.Helper()
					out, err := s.Check(ctx, limiter.Batch{Requests: reqs, Cost: cost, DryRun: dry, NowUS: journalAt, Usage: usage})
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				for i, step := range []struct {
					cost           int64
					dry            bool
					usage          string
					admitted, recd bool
				}{
					{1, false, entry, true, true},
					{2, false, entry, true, true},
					{0, false, entry, true, true},
					{1, true, entry, true, false}, // a dry run
					{1, false, "", true, false},   // no row
					{1, false, entry, true, true},
					{1, false, entry, false, false}, // the burst of 5 is spent
				} {
					out := check(step.cost, step.dry, step.usage)
					if out.Admitted != step.admitted || out.Recorded != step.recd {
						t.Fatalf("step %d: admitted %v recorded %v, want %v %v", i, out.Admitted, out.Recorded, step.admitted, step.recd)
					}
				}
				if units, decisions := journalCounts(t, c.Client, jkey, row); units != 4 || decisions != 4 {
					t.Errorf("journal: %d units in %d decisions, want 4 in 4", units, decisions)
				}
			})
		}
		t.Run(c.Name+"/shadow", func(t *testing.T) {
			ctx := context.Background()
			s := New(c.Client)
			key := c.Prefix + "{s}shadow"
			row := statekey.UsageRow("", "", "anonymous", "*")
			one := limiter.Params{Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.HourUS}
			for range 3 {
				out, err := s.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: one, Shadow: true}}, Cost: 1,
					NowUS: journalAt, Usage: statekey.UsageEntry("", "", "anonymous", "*")})
				if err != nil || !out.Admitted || !out.Recorded {
					t.Fatalf("shadow check: %+v %v", out, err)
				}
			}
			if units, decisions := journalCounts(t, c.Client, statekey.JournalKeyOf(key), row); units != 3 || decisions != 3 {
				t.Errorf("journal: %d units in %d decisions, want 3 in 3", units, decisions)
			}
		})
	}
}

// TestJournalRecordsHoldsOnce: a hold's check journals its decision
// without units; its settlement journals its final units once, under the
// hold's hash (a repeat changes nothing and says it was journaled), and so
// does its expiry, marked expired.
func TestJournalRecordsHoldsOnce(t *testing.T) {
	client, prefix := testenv.Redis(t)
	ctx := context.Background()
	s := New(client)
	window := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 100, PeriodUS: limiter.HourUS}
	key := prefix + "{h}w"
	jkey := statekey.JournalKeyOf(key)
	row := statekey.UsageRow("t", "k", "authenticated", "/v1/chat")
	hash := func(i int) string { return "0123456789abcdef0123456789abcd" + strconv.Itoa(10+i) }
	open := func(i int, ttl int64) {
		t.Helper()
		hold := &limiter.Hold{ID: "hold" + strconv.Itoa(i), Key: statekey.HoldKey(prefix, 'h', "hold"+strconv.Itoa(i)), TTLUS: ttl,
			Usage: statekey.HoldUsage(hash(i), "192.0.2.7", row)}
		out, err := s.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: window}}, Cost: 10, Hold: hold,
			NowUS: journalAt, Usage: statekey.UsageEntry("t", "k", "authenticated", "/v1/chat")})
		if err != nil || !out.Admitted || !out.Recorded {
			t.Fatalf("hold %d: %+v %v", i, out, err)
		}
	}
	open(1, limiter.HourUS)
	open(2, limiter.SecondUS)
	if units, decisions := journalCounts(t, client, jkey, row); units != 0 || decisions != 2 {
		t.Fatalf("journal after two holds: %d units in %d decisions, want 0 in 2", units, decisions)
	}
	for range 2 {
		st, err := s.Settle(ctx, limiter.Settle{Key: statekey.HoldKey(prefix, 'h', "hold1"), Cost: 7, NowUS: journalAt + 1})
		if err != nil || !st.Recorded {
			t.Fatalf("settle: %+v %v", st, err)
		}
	}
	st, err := s.Settle(ctx, limiter.Settle{Key: statekey.HoldKey(prefix, 'h', "hold2"), Expire: true, NowUS: journalAt + 2*limiter.SecondUS})
	if err != nil || !st.Recorded {
		t.Fatalf("expire: %+v %v", st, err)
	}
	_, holds := readJournal(t, client, jkey)
	want := map[string]string{hash(1): journalMinute + "\x007\x000\x00192.0.2.7\x00" + row, hash(2): journalMinute + "\x000\x001\x00192.0.2.7\x00" + row}
	for h, w := range want {
		if holds[h] != w {
			t.Errorf("hold %s's entry: %q, want %q", h, holds[h], w)
		}
	}
	if len(holds) != 2 {
		t.Errorf("%d holds' entries, want 2: %q", len(holds), holds)
	}
}

// TestJournalStopsAtItsCap: a journal nobody claims stops at journalCap
// bytes. On a Redis whose proto-max-bulk-len is the cap, as on any Redis
// whose limit lies above it, every check script journals an admitted
// check only while its entry fits: past that the check is admitted all
// the same, its state written once, no call fails, and the check is
// answered not Recorded, for its caller to count. A call of several
// checks journals those whose entries fit. A claim (the journal moved
// aside) makes room again.
func TestJournalStopsAtItsCap(t *testing.T) {
	srv := testenv.StartRedisServer(t, "--proto-max-bulk-len", strconv.Itoa(journalCap))
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS}
	month := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 1000, PeriodUS: 31 * limiter.DayUS, Calendar: limiter.CalendarMonth}
	tenant := "11111111-1111-1111-1111-111111111111"
	entry := statekey.UsageEntry(tenant, "", "authenticated", "GET /x")
	row := statekey.UsageRow(tenant, "", "authenticated", "GET /x")
	size := len(entry) + len(journalMinute) + len("1:1") // a check's entry, at a cost of 1
	for _, path := range []struct {
		name   string
		noLean bool
		checks int             // per call
		extra  *limiter.Params // a second rule of the check
	}{
		{"lean1", false, 1, nil},
		{"lean", false, 1, &month},
		{"check.lua", true, 1, nil},
		{"lean, one call", false, 4, nil},
		{"check.lua, one call", true, 4, nil},
	} {
		t.Run(path.name, func(t *testing.T) {
			s := New(client)
			s.NoLean = path.noLean
			key := "tg:{c}" + path.name
			jkey := statekey.JournalKeyOf(key)
			defer client.Del(ctx, jkey, jkey+"claimed", key, key+"2")
			// Room for two entries and a half.
			full := journalCap - 2*size - size/2
			if err := client.SetRange(ctx, jkey, int64(full-1), "x").Err(); err != nil {
				t.Fatal(err)
			}
			b := limiter.Batch{Requests: []limiter.Request{{Key: key, Params: gcra}}, Cost: 1, NowUS: journalAt, Usage: entry}
			if path.extra != nil {
				b.Requests = append(b.Requests, limiter.Request{Key: key + "2", Params: *path.extra})
			}
			var outs []limiter.Outcome
			for len(outs) < 4 {
				if path.checks == 1 {
					out, err := s.Check(ctx, b)
					if err != nil {
						t.Fatalf("check %d: %v", len(outs), err)
					}
					outs = append(outs, out)
					continue
				}
				checks := make([]*pending, path.checks)
				for i := range checks {
					checks[i] = &pending{batch: b}
				}
				s.run(ctx, checks)
				for _, p := range checks {
					if p.err != nil {
						t.Fatalf("check %d: %v", len(outs), p.err)
					}
					outs = append(outs, p.out)
				}
			}
			for i, out := range outs {
				if !out.Admitted || out.Recorded != (i < 2) {
					t.Errorf("check %d: admitted %v recorded %v, want admitted, recorded only while its entry fits (the first two)",
						i, out.Admitted, out.Recorded)
				}
				if got, want := out.Results[0].Remaining, outs[0].Results[0].Remaining-int64(i); got != want {
					t.Errorf("check %d: %d remaining, want %d: each check consumes once", i, got, want)
				}
			}
			if n, err := client.StrLen(ctx, jkey).Result(); err != nil || n != int64(full+2*size) {
				t.Errorf("journal of %d bytes (%v), want %d: the two entries that fit the cap of %d", n, err, full+2*size, journalCap)
			}
			tail, err := client.GetRange(ctx, jkey, int64(full), -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			rows, _, err := metering.ParseJournal(tail)
			if want := (metering.Counts{Allowed: 2, AllowedUnits: 2}); err != nil || len(rows) != 1 || rows[metering.JournalRow{Row: row, Minute: journalMinuteS}] != want {
				t.Errorf("journaled %+v (%v), want %+v", rows, err, want)
			}
			// The worker claims the journal: checks journal again.
			if err := client.Rename(ctx, jkey, jkey+"claimed").Err(); err != nil {
				t.Fatal(err)
			}
			if out, err := s.Check(ctx, b); err != nil || !out.Admitted || !out.Recorded {
				t.Errorf("a check after the claim: %+v %v, want admitted and recorded", out, err)
			}
		})
	}
	t.Run("settle", func(t *testing.T) {
		s := New(client)
		key := "tg:{h}w"
		jkey := statekey.JournalKeyOf(key)
		window := limiter.Params{Algorithm: limiter.FixedWindow, Limit: 100, PeriodUS: limiter.HourUS}
		hold := &limiter.Hold{ID: "h1", Key: statekey.HoldKey("tg:", 'h', "h1"), TTLUS: limiter.HourUS,
			Usage: statekey.HoldUsage("0123456789abcdef0123456789abcdef", "", row)}
		defer client.Del(ctx, jkey, key, hold.Key)
		out, err := s.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: window}}, Cost: 10, Hold: hold,
			NowUS: journalAt, Usage: entry})
		if err != nil || !out.Admitted || !out.Recorded {
			t.Fatalf("hold: %+v %v", out, err)
		}
		if err := client.SetRange(ctx, jkey, journalCap-1, "x").Err(); err != nil { // full
			t.Fatal(err)
		}
		for i := range 2 {
			st, err := s.Settle(ctx, limiter.Settle{Key: hold.Key, Cost: 7, NowUS: journalAt + 1})
			if err != nil || st.Recorded || st.Cost != 7 || st.Repeated != (i == 1) {
				t.Errorf("settlement %d: %+v %v, want settled at 7, not recorded (the journal is full), repeated the second time", i, st, err)
			}
		}
		if n, err := client.StrLen(ctx, jkey).Result(); err != nil || n != journalCap {
			t.Errorf("journal of %d bytes (%v), want %d", n, err, journalCap)
		}
		if count, err := client.HGet(ctx, key, "count").Result(); err != nil || count != "7" {
			t.Errorf("window count %q (%v), want 7: the settlement moved it", count, err)
		}
	})
}

// TestOnlyTheJournalHelpersAppend: every script writes a usage journal
// through check.lua's journalFlush or journalAppend, which keep it within
// journalCap: no other APPEND.
func TestOnlyTheJournalHelpersAppend(t *testing.T) {
	helpers := checkPrelude()
	if n := strings.Count(helpers, "'APPEND'"); n != 2 || strings.Count(checkLua, "'APPEND'") != n {
		t.Errorf("check.lua: %d APPENDs in its prelude, %d in all, want the two of journalFlush and journalAppend", n, strings.Count(checkLua, "'APPEND'"))
	}
	for name, src := range map[string]string{"lean.lua": leanLua, "lean1.lua": lean1Lua, "settle.lua": settleLua, "ops.lua": opsLua,
		"lease.lua": leaseLua, "release.lua": releaseLua, "seed.lua": seedLua, "rate.lua": rateLua, "calendar.lua": calendarLua} {
		if strings.Contains(src, "'APPEND'") {
			t.Errorf("%s APPENDs by itself: use journalAppend", name)
		}
	}
}
