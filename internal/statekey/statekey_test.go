package statekey

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
)

// TestKeyLayout: the keys a check writes are laid out as the package
// comment says, and Tag reads their hash tag back.
func TestKeyLayout(t *testing.T) {
	rule := [3]byte{0x41, 0x02, 0x03}
	tag, short := Compact("00000000-0000-4000-8000-000000000001")
	v4 := AppendAddr(nil, "192.0.2.1")
	v6 := AppendAddr(nil, "2001:db8:1:2::/64")
	cases := []struct {
		name, prefix string
		key          []byte
		want         string
		tag          byte
	}{
		{"per key", "tg:", AppendKey(nil, "tg:", tag, rule, short[:], nil),
			"tg:{" + string([]byte{tag}) + "}" + string(rule[:]) + string(short[:]), tag},
		{"per IP of a tenant", "tg:", AppendKey(nil, "tg:", tag, rule, short[:], v6),
			"tg:{" + string([]byte{tag}) + "}" + string(rule[:]) + string(short[:]) + string(v6), tag},
		{"anonymous", "p:", AppendAnonymousKey(nil, "p:", rule, v4),
			"p:{" + string([]byte{IPTag(v4)}) + "}" + string(rule[:]) + string(v4), IPTag(v4)},
		{"after other bytes", "tg:", AppendKey([]byte("x"), "tg:", tag, rule, short[:], nil),
			"xtg:{" + string([]byte{tag}) + "}" + string(rule[:]) + string(short[:]), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := string(c.key); got != c.want {
				t.Errorf("key %q, want %q", got, c.want)
			}
			if c.tag == 0 {
				return
			}
			if got := Tag(c.prefix, string(c.key)); got != c.tag {
				t.Errorf("Tag = %q, want %q", got, c.tag)
			}
		})
	}
	if got := len(AppendKey(nil, "tg:", tag, rule, short[:], nil)); got != 14 {
		t.Errorf("a per-key state key under tg: is %d bytes, want 14", got)
	}
	if got := len(AppendAnonymousKey(nil, "tg:", rule, v4)); got != 13 {
		t.Errorf("an anonymous IPv4 state key under tg: is %d bytes, want 13", got)
	}
	if got := Tag("tg:", "tg:"); got != 0 {
		t.Errorf("Tag of a key shorter than its layout = %q, want 0", got)
	}
}

// TestTenantMonthKey: a tenant's month key is its tenant-scoped key of
// the month's rule ID.
func TestTenantMonthKey(t *testing.T) {
	const id = "00000000-0000-4000-8000-000000000002"
	tag, short := Compact(id)
	want := string(AppendKey(nil, "tg:", tag, TenantMonthID("monthly_quota"), short[:], nil))
	if got := TenantMonthKey("tg:", id, "monthly_quota"); got != want {
		t.Errorf("TenantMonthKey = %q, want %q", got, want)
	}
}

// TestCredits: a balance's two keys are of equal length, share the
// tenant's hash tag, differ, and SplitCredits returns them.
func TestCredits(t *testing.T) {
	tag, short := Compact("00000000-0000-4000-8000-000000000003")
	for _, prefix := range []string{"tg:", "a-much-longer-prefix:"} {
		rules := AppendKey(nil, prefix, tag, [3]byte{1, 2, 3}, short[:], nil)
		b := AppendCredits(rules, prefix, tag, short)
		counter, log := SplitCredits(string(b[len(rules):]))
		if counter == log || len(counter) != len(log) {
			t.Errorf("prefix %q: counter %q and log %q, want two keys of equal length", prefix, counter, log)
		}
		for _, k := range []string{counter, log} {
			if !strings.HasPrefix(k, prefix) || Tag(prefix, k) != tag {
				t.Errorf("prefix %q: key %q is not under the prefix and the tenant's tag", prefix, k)
			}
		}
	}
}

// TestRecordKeys: a hold's and a lease's records of one ID differ, sit
// under the check's hash tag, and depend on every byte of the ID.
func TestRecordKeys(t *testing.T) {
	const prefix, tag = "tg:", byte('x')
	hold, lease := HoldKey(prefix, tag, "id-1"), LeaseKey(prefix, tag, "id-1")
	if hold == lease {
		t.Errorf("hold and lease records share key %q", hold)
	}
	for _, k := range []string{hold, lease} {
		if !strings.HasPrefix(k, prefix+"{x}") || Tag(prefix, k) != tag {
			t.Errorf("record key %q: want it under %q", k, prefix+"{x}")
		}
	}
	if other := HoldKey(prefix, tag, "id-2"); other == hold {
		t.Errorf("two hold IDs share record key %q", hold)
	}
	if got := HoldKey(prefix, tag, "id-1"); got != hold {
		t.Errorf("HoldKey is not stable: %q, then %q", hold, got)
	}
}

// TestProbeKey: the probe peeks at a key under the prefix.
func TestProbeKey(t *testing.T) {
	if got, want := ProbeKey("tg:"), "tg:{tollgate}:probe"; got != want {
		t.Errorf("ProbeKey = %q, want %q", got, want)
	}
}

// TestRecordsShareTheirStatesTag: for every tag a record is written
// under, the record's hash tag is its states' one byte (one Cluster
// slot), and the legacy key, where records of tags from 0x80 were
// written as two bytes, is looked up only for those tags.
func TestRecordsShareTheirStatesTag(t *testing.T) {
	rule := [3]byte{1, 2, 3}
	for v := range uint64(254) {
		tag := tagByte(v)
		state := string(AppendKey(nil, "tg:", tag, rule, []byte("short"), nil))
		for _, k := range []string{HoldKey("tg:", tag, "id"), LeaseKey("tg:", tag, "id")} {
			if got, want := k[:len("tg:")+3], state[:len("tg:")+3]; got != want {
				t.Fatalf("tag %#x: record under %q, its states under %q", tag, got, want)
			}
		}
		legacy := LegacyHoldKey("tg:", tag, "id")
		switch {
		case tag < 0x80 && legacy != "":
			t.Errorf("tag %#x: a legacy key %q, want none", tag, legacy)
		case tag >= 0x80 && (legacy == "" || legacy == HoldKey("tg:", tag, "id") || legacy == LegacyLeaseKey("tg:", tag, "id")):
			t.Errorf("tag %#x: legacy key %q", tag, legacy)
		case tag >= 0x80 && !strings.HasPrefix(legacy, "tg:{"+string(rune(tag))+"}"):
			t.Errorf("tag %#x: legacy key %q is not the UTF-8 form", tag, legacy)
		}
	}
}

// TestSeedKeysAreTheStatesMarkers: the seed marker of every tenant's
// month key, as the stores derive it (limiter.SeedKeyOf), is among
// SeedKeys, the markers the rebuild looks for.
func TestSeedKeysAreTheStatesMarkers(t *testing.T) {
	keys := SeedKeys("tg:")
	if len(keys) != 254 {
		t.Fatalf("%d seed keys, want 254", len(keys))
	}
	for i := range 2000 {
		id := fmt.Sprintf("tenant-%d", i)
		key := TenantMonthKey("tg:", id, "monthly-quota")
		got := limiter.SeedKeyOf(key)
		tag, _ := Compact(id)
		if want := SeedKey("tg:", tag); got != want || !slices.Contains(keys, got) {
			t.Fatalf("marker of %q: %q, want %q among SeedKeys", key, got, want)
		}
	}
}

// TestUsageEntry: an entry's head gives its field's length (the field
// being "r", the row, NUL and the ten-digit minute the script adds) and
// holds the row, which EntryRow reads back.
func TestUsageEntry(t *testing.T) {
	for _, parts := range [][4]string{
		{"00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002", "authenticated", "GET /repos/{id}"},
		{"", "", "anonymous", "*"},
	} {
		row := UsageRow(parts[0], parts[1], parts[2], parts[3])
		entry := UsageEntry(parts[0], parts[1], parts[2], parts[3])
		if want := strconv.Itoa(1+len(row)+1+10) + ":r" + row + "\x00"; entry != want {
			t.Errorf("UsageEntry%q = %q, want %q", parts, entry, want)
		}
		if got := EntryRow(entry); got != row {
			t.Errorf("EntryRow(%q) = %q, want %q", entry, got, row)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = UsageEntry("t", "k", "authenticated", "*") }); n > 1 {
		t.Errorf("UsageEntry allocates %v times, want 1", n)
	}
}
