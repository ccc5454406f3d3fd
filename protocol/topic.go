package protocol

// MaxTopicLen is the longest topic the grammar allows, in bytes.
const MaxTopicLen = 256

// topicByte marks the bytes of [A-Za-z0-9_.:/@-].
var topicByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "_.:/@-" {
		t[c] = true
	}
	return t
}()

// ValidTopic reports whether t matches the topic grammar: 1 to 256 bytes of
// [A-Za-z0-9_.:/@-]. It says nothing about reserved topics.
func ValidTopic(t string) bool {
	if len(t) == 0 || len(t) > MaxTopicLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		if !topicByte[t[i]] {
			return false
		}
	}
	return true
}

// Reserved reports whether t is reserved for the server (starts with "__").
func Reserved(t string) bool { return len(t) >= 2 && t[0] == '_' && t[1] == '_' }

// CheckTopic returns "" for a topic a client may use, or why it may not.
func CheckTopic(t string) string {
	switch {
	case t == "":
		return "missing topic"
	case !ValidTopic(t):
		return "topic must be 1 to 256 bytes of [A-Za-z0-9_.:/@-]"
	case Reserved(t):
		return "topics starting with __ are reserved"
	}
	return ""
}
