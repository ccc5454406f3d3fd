package serverapi

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzBody feeds arbitrary bodies to every method: each is answered with
// one JSON object holding a result (200) or an error (400 or 413), never a
// panic; and the backend sees only valid params.
func FuzzBody(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"topic":"a","data":1}`, `{"topics":["a","b"],"data":{}}`, `{"user":"u"}`,
		`{"user":"u","topic":"t"}`, `[]`, `null`, `{"topic":"__x","data":1}`, `{"topic":"a",`,
		`{"topics":[1],"data":1}`, "\xff", `{"user":"` + strings.Repeat("u", 2000) + `"}`,
		`{"topic":"a","Topic":"__x","data":1}`, `{"user":"a","user":"b"}`, `{"\u0074opic":"a","data":1}`,
		`{"topic":"a","data":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
	} {
		for _, m := range []string{"publish", "broadcast", "disconnect", "unsubscribe", "info"} {
			f.Add(m, s)
		}
	}
	rec := &recorder{}
	h, err := New(Config{Key: testKey, MaxBodyBytes: 4096}, Deps{Backend: rec})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, body string) {
		req := httptest.NewRequest("POST", Prefix, strings.NewReader(body))
		req.URL.Path = Prefix + method // any bytes, as a client's path may hold
		req.Header.Set("Authorization", "apikey "+testKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var a struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatalf("answer %q is not JSON", w.Body.Bytes())
		}
		switch {
		case w.Code == 200 && a.Result != nil && a.Error == nil:
		case w.Code == 404 && !known(method):
		case (w.Code == 400 || w.Code == 413) && a.Error != nil && a.Error.Message != "":
		default:
			t.Fatalf("%s %q: status %d, answer %s", method, body, w.Code, w.Body.Bytes())
		}
		for _, c := range rec.take() {
			if strings.Contains(c, " __") {
				t.Fatalf("a reserved topic reached the backend: %q", c)
			}
		}
	})
}
