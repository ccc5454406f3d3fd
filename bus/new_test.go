package bus

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// New picks the bus redis.bus names, on the client it is given; it needs
// that client and refuses a bus it does not know. Nothing is dialled.
func TestNewPicksTheConfiguredBus(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tt := range []struct {
		give string
		want string
	}{{"", "*bus.Redis"}, {"single", "*bus.Redis"}, {"sharded", "*bus.Sharded"}} {
		b, err := New(Config{Bus: tt.give, ChannelPrefix: "t:"}, Deps{Client: c, InstanceID: "i"})
		if err != nil {
			t.Fatalf("bus %q: %v", tt.give, err)
		}
		if got := typeName(b); got != tt.want {
			t.Errorf("bus %q: %s, want %s", tt.give, got, tt.want)
		}
		if err := b.Close(); err != nil {
			t.Errorf("bus %q: Close before Start: %v", tt.give, err)
		}
	}
	if _, err := New(Config{Bus: "ring"}, Deps{Client: c}); err == nil {
		t.Error("an unknown bus: no error")
	}
	if _, err := New(Config{}, Deps{}); err == nil {
		t.Error("no client: no error")
	}
}

func typeName(b Bus) string {
	switch b.(type) {
	case *Redis:
		return "*bus.Redis"
	case *Sharded:
		return "*bus.Sharded"
	}
	return "other"
}
