package history

import (
	"errors"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/rtserver/rtserver/internal/jsonexact"
)

// The stored form of a message, as the Redis store keeps it (one list
// element) and its script writes it:
//
//	<offset> ' ' <unix ms> ' ' <data>
//
// offset and time in decimal ASCII, data the raw JSON as published. Text,
// so the script builds it with one concatenation.

// AppendStored appends the stored form of m to dst.
func AppendStored(dst []byte, m Message) []byte {
	dst = strconv.AppendUint(dst, m.Offset, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, m.Time, 10)
	dst = append(dst, ' ')
	return append(dst, m.Data...)
}

var errStored = errors.New("history: malformed stored message")

// DecodeStored parses a stored message. Whoever can write to Redis can
// write these bytes: it checks everything a subscriber relies on (a
// positive offset, JSON data in valid UTF-8) and never panics. Data is a
// copy.
func DecodeStored(s string) (Message, error) {
	m, _, err := decodeStoredInto(nil, s)
	return m, err
}

// decodeStoredInto is DecodeStored with Data copied to the end of buf
// (capped there, so that what buf later takes cannot reach it): a page of
// messages read at once shares one allocation. It returns buf with Data.
func decodeStoredInto(buf []byte, s string) (Message, []byte, error) {
	off, rest, ok := cutNumber(s)
	if !ok || off == 0 {
		return Message{}, buf, errStored
	}
	ts, rest, ok := cutNumber(rest)
	if !ok || ts > 1<<62 {
		return Message{}, buf, errStored
	}
	if len(rest) == 0 || !utf8.ValidString(rest) {
		return Message{}, buf, errStored
	}
	start := len(buf)
	buf = append(buf, rest...)
	data := buf[start:len(buf):len(buf)]
	if valid, _ := jsonexact.Check(data, math.MaxInt); !valid {
		return Message{}, buf[:start], errStored
	}
	return Message{Offset: off, Time: int64(ts), Data: data}, buf, nil
}

// cutNumber reads decimal digits (at most 19, no sign, no leading zero
// unless "0") and the space after them.
func cutNumber(s string) (uint64, string, bool) {
	i := 0
	for i < len(s) && i < 20 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 19 || i >= len(s) || s[i] != ' ' || (s[0] == '0' && i > 1) {
		return 0, "", false
	}
	v, err := strconv.ParseUint(s[:i], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return v, s[i+1:], true
}
