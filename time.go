package tollgate

import "time"

// Times Tollgate accepts. An instant is written out in RFC 3339 (JSON,
// the audit log, CSV), which has room for the years 0000 to 9999 in UTC
// only: encoding/json refuses to write any other, so a time that is
// accepted must lie in that range once in UTC. "9999-12-31T23:59:59-01:00"
// is a valid RFC 3339 input, but the instant it names is in year 10000.
var (
	// MinTime is the earliest instant accepted: 0000-01-01T00:00:00Z.
	MinTime = time.Date(0, time.January, 1, 0, 0, 0, 0, time.UTC)
	// MaxTime is the latest instant accepted: the last nanosecond of
	// 9999-12-31 in UTC.
	MaxTime = time.Date(9999, time.December, 31, 23, 59, 59, 999_999_999, time.UTC)
)

// TimeRangeProblem is the problem CheckTime names a field with.
const TimeRangeProblem = "must be from 0000-01-01T00:00:00Z to 9999-12-31T23:59:59Z (in UTC)"

// CheckTime records in f, under field, the problem with t as an input
// time: TimeRangeProblem when t lies outside MinTime–MaxTime. Every time a
// request, a form or a command line gives goes through it before it is
// used, so that no answer or audit entry holds a time it cannot write.
func CheckTime(f map[string]string, field string, t time.Time) {
	if !InTimeRange(t) {
		f[field] = TimeRangeProblem
	}
}

// InTimeRange reports whether t lies from MinTime to MaxTime.
func InTimeRange(t time.Time) bool {
	return !t.Before(MinTime) && !t.After(MaxTime)
}
