package main

import (
	"encoding/json"
	"testing"
)

func TestSioRequestIsAnEventWithAck(t *testing.T) {
	got := string(sioRequest(7, "publish", []byte(`{"topic":"a","data":{"rtbts":5}}`)))
	want := `427["publish",{"topic":"a","data":{"rtbts":5}}]`
	if got != want {
		t.Fatalf("sioRequest = %s, want %s", got, want)
	}
	var v []json.RawMessage
	if err := json.Unmarshal([]byte(got[3:]), &v); err != nil || len(v) != 2 {
		t.Fatalf("event arguments %s: %v", got[3:], err)
	}
}

func TestSioFrames(t *testing.T) {
	for _, tc := range []struct {
		in      string
		id      uint64
		isErr   bool
		noFrame bool
	}{
		{in: `4312[true]`, id: 12},
		{in: `430[{"error":"topic"}]`, id: 0, isErr: true},
		{in: `42["message",{"topic":"a"}]`, noFrame: true},
		{in: `2`, noFrame: true},
		{in: `40{"sid":"x"}`, noFrame: true},
	} {
		fs, err := sioFrames([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if tc.noFrame {
			if len(fs) != 0 {
				t.Fatalf("%s: got %d frames, want none", tc.in, len(fs))
			}
			continue
		}
		if len(fs) != 1 || fs[0].ID == nil || *fs[0].ID != tc.id || (fs[0].Error != nil) != tc.isErr {
			t.Fatalf("%s: got %+v", tc.in, fs)
		}
	}
	if _, err := sioFrames([]byte(`43[true]`)); err == nil {
		t.Fatal("an acknowledgement without an id decoded")
	}
}
