package message

import (
	"slices"
	"strings"
	"testing"

	"github.com/rtserver/rtserver/pressure"
)

func TestParseFailPolicy(t *testing.T) {
	tests := []struct {
		give    string
		want    FailPolicy
		wantErr bool
	}{
		{"open", FailOpen, false},
		{"closed", FailClosed, false},
		{"", 0, true},
		{"Open", 0, true},
		{"close", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseFailPolicy(tt.give)
		if (err != nil) != tt.wantErr || (err == nil && got != tt.want) {
			t.Errorf("ParseFailPolicy(%q) = %v, %v; want %v, err %v", tt.give, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != tt.give {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tt.give)
		}
	}
}

func TestParseReasons(t *testing.T) {
	tests := []struct {
		give    []string
		want    []pressure.Reason
		wantErr string
	}{
		{nil, []pressure.Reason{}, ""},
		{[]string{"MEMORY", "PUBLISH_RATE"}, []pressure.Reason{pressure.Memory, pressure.PublishRate}, ""},
		{[]string{"SUBSCRIBERS", "MEMORY", "SUBSCRIBERS"}, []pressure.Reason{pressure.Subscribers, pressure.Memory}, ""},
		{[]string{"MEMORY", "memory"}, nil, `reasons[1]: unknown pressure reason "memory"`},
		{[]string{"NONE"}, nil, `reasons[0]: unknown pressure reason "NONE"`},
		{[]string{"CONCURRENCY"}, nil, `"CONCURRENCY"`},
	}
	for _, tt := range tests {
		got, err := ParseReasons(tt.give)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseReasons(%q) error = %v, want %q", tt.give, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseReasons(%q) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
	// What ParseReasons returns, Register accepts.
	rs, _ := ParseReasons([]string{"MEMORY", "PUBLISH_RATE", "SUBSCRIBERS"})
	a := newAdmission(Deps{Snapshot: newPressure(pressure.None).Snapshot})
	if err := a.Register("all", Rule{Reasons: rs}); err != nil {
		t.Error(err)
	}
}
