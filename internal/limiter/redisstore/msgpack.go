package redisstore

import (
	"encoding/binary"
	"errors"
	"math"
)

// The script takes its batch and returns its answer as MessagePack arrays
// of integers (Redis's cmsgpack): one argument and one reply string
// instead of hundreds, which Redis would otherwise convert one by one.
// Only what those arrays use is implemented here.

// appendArrayHeader appends the header of an array of n elements.
func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// appendInt appends v in its shortest MessagePack form.
func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0 && v < 128:
		return append(b, byte(v))
	case v < 0 && v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8 && v <= math.MaxInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16 && v <= math.MaxInt16:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		return append(b, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

var errMsgpack = errors.New("redisstore: malformed reply")

// decodeInts appends the integers of the MessagePack array in b to dst.
// Floats with an integral value are accepted (Lua numbers are doubles).
func decodeInts(dst []int64, b string) ([]int64, error) {
	if len(b) == 0 {
		return dst, errMsgpack
	}
	var n, i int
	switch c := b[0]; {
	case c&0xf0 == 0x90:
		n, i = int(c&0x0f), 1
	case c == 0xdc && len(b) >= 3:
		n, i = int(b[1])<<8|int(b[2]), 3
	case c == 0xdd && len(b) >= 5:
		n, i = int(b[1])<<24|int(b[2])<<16|int(b[3])<<8|int(b[4]), 5
	default:
		return dst, errMsgpack
	}
	for range n {
		if i >= len(b) {
			return dst, errMsgpack
		}
		c := b[i]
		i++
		var v int64
		need := 0
		switch {
		case c < 0x80:
			v = int64(c)
		case c >= 0xe0:
			v = int64(int8(c))
		case c == 0xcc, c == 0xd0:
			need = 1
		case c == 0xcd, c == 0xd1:
			need = 2
		case c == 0xce, c == 0xd2, c == 0xca:
			need = 4
		case c == 0xcf, c == 0xd3, c == 0xcb:
			need = 8
		default:
			return dst, errMsgpack
		}
		if need > 0 {
			if i+need > len(b) {
				return dst, errMsgpack
			}
			var u uint64
			for _, x := range []byte(b[i : i+need]) {
				u = u<<8 | uint64(x)
			}
			i += need
			switch c {
			case 0xcc, 0xcd, 0xce, 0xcf:
				v = int64(u)
			case 0xd0:
				v = int64(int8(u))
			case 0xd1:
				v = int64(int16(u))
			case 0xd2:
				v = int64(int32(u))
			case 0xd3:
				v = int64(u)
			case 0xca:
				v = int64(math.Float32frombits(uint32(u)))
			case 0xcb:
				v = int64(math.Float64frombits(u))
			}
		}
		dst = append(dst, v)
	}
	return dst, nil
}
