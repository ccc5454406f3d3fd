package server

import (
	"bytes"
	"testing"

	"pgregory.net/rapid"

	"github.com/rtserver/rtserver/protocol"
)

// A payload framed in place (appended to frameRoom, then frameIn) is the
// same frame frameText builds by copying, whatever its length: every
// header size (7-bit, 16-bit and 64-bit lengths) and room that is too
// small and grows.
func TestFrameInPlaceMatchesFrameText(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.OneOf(rapid.IntRange(0, 300), rapid.IntRange(65530, 65540)).Draw(rt, "len")
		room := rapid.IntRange(0, 200).Draw(rt, "room")
		payload := bytes.Repeat([]byte{'x'}, n)
		got := frameIn(append(frameRoom(room), payload...))
		if want := frameText(payload); !bytes.Equal(got, want) {
			rt.Fatalf("frame of %d bytes: in place %q..., copied %q...", n, got[:min(len(got), 12)], want[:min(len(want), 12)])
		}
	})
}

// A single request's answer is one allocation: encoded after room for its
// header and framed there, not encoded and then copied into a frame.
func TestAnswerIsFramedWithOneAllocation(t *testing.T) {
	id := []byte("12345")
	n := testing.AllocsPerRun(1000, func() {
		_ = frameIn(protocol.AppendResult(answerDst(true), id, emptyResult))
	})
	if n != 1 {
		t.Fatalf("framing a publish's answer allocates %v times, want 1", n)
	}
}
