package main

import (
	"net/http"
	"regexp"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rtserver/rtserver/access"
	"github.com/rtserver/rtserver/history"
)

// topicGrants: everyone may read rooms and announcements, a user may read
// only their own private topic, and no client publishes anything itself.
// Rooms keep presence (who is in them) with join/leave notifications.
// Messages reach room:* through chat.say (which validates them and names
// the sender), and announce:* and user:* through the server API: both
// publish from the server's side, where grants do not apply.
func topicGrants() access.Config {
	return access.Config{
		Namespaces: []access.Namespace{
			// A {user} pattern decides every user:<name> topic, whoever
			// asks: its owner may subscribe; another user, or an
			// anonymous connection, is refused here, never passed on to
			// the default.
			{Pattern: "user:{user}", Rule: access.Rule{Subscribe: []string{access.GrantOwner}}},
			// Announcements keep a short history, so a page opened after
			// one was published still shows it.
			{Pattern: "announce:*", Rule: access.Rule{Subscribe: []string{access.GrantAny}, History: announceHistory}},
			// Rooms keep their presence, and their readers hear who comes
			// and goes: the page's list of who is in the room. They keep
			// history too: a page shows the recent messages when it joins,
			// and misses nothing across a reconnect.
			{Pattern: "room:*", Rule: access.Rule{Subscribe: []string{access.GrantAny}, Presence: true, JoinLeave: true, History: roomHistory}},
		},
		// Anything else: read by anyone, published by nobody.
		Default: &access.Rule{Subscribe: []string{access.GrantAny}},
	}
}

// roomHistory: ttl covers a drain, the page's reconnect backoff and a
// retry hint with room to spare, and size a room's peak rate times ttl
// for rooms up to about 30 messages a second (docs/history.md, Sizing);
// announceHistory keeps the last few for a day.
var (
	roomHistory     = history.Policy{Size: 10000, TTL: 5 * time.Minute}
	announceHistory = history.Policy{Size: 10, TTL: 24 * time.Hour}
)

// demoUser is what /token accepts as a user name: no '/' or ':' (the
// pattern's separator), so every name owns exactly its user:<name> topic.
var demoUser = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,40}$`)

// demoTokens serves GET /token?user=NAME: an HS256 JWT for that user,
// valid for ttl (0: an hour). Anyone may ask for any name: it shows private topics
// at work, it is not authentication. A real application issues tokens
// after signing its users in.
func demoTokens(secret []byte, ttl time.Duration) http.Handler {
	if ttl <= 0 {
		ttl = time.Hour
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.URL.Query().Get("user")
		if !demoUser.MatchString(user) {
			http.Error(w, "user must be 1 to 40 characters of [A-Za-z0-9_.-]", http.StatusBadRequest)
			return
		}
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": user,
			"exp": time.Now().Add(ttl).Unix(),
		}).SignedString(secret)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte(tok))
	})
}
