package docgen

import (
	"fmt"
	"strings"
)

// Commands returns the command lines of program in an example text, as
// a --help's "Examples:" part holds them, each as the arguments after
// the program's name, so that a test can check that they parse. A line
// ending with '\' goes on on the next; "#" begins a comment; a pipeline
// gives each of its commands that runs program ("xdsadmin get -o yaml |
// xdsadmin apply -f -" is two), and the commands of other programs (jq)
// are left out. Words are split as a POSIX shell splits them, with
// single and double quotes and backslashes; a redirection (">", "<")
// ends the command's arguments. It is an error for the text to hold no
// command of program, or to have an unterminated quote.
func Commands(text, program string) ([][]string, error) {
	var out [][]string
	for _, line := range joinContinued(text) {
		words, err := shellWords(line)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", line, err)
		}
		for _, cmd := range pipeline(words) {
			if len(cmd) > 0 && cmd[0] == program {
				out = append(out, cmd[1:])
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s command in the examples:\n%s", program, text)
	}
	return out, nil
}

// joinContinued returns the lines of text, those ending with '\' joined
// with the next.
func joinContinued(text string) []string {
	var out []string
	var cur strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " "), `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// A word of a command line; op is set for an unquoted "|", ">" or "<".
type word struct {
	text string
	op   bool
}

// pipeline splits words into the commands of a pipeline, each cut at its
// first redirection.
func pipeline(words []word) [][]string {
	var out [][]string
	var cmd []string
	cut := false
	for _, w := range words {
		switch {
		case w.op && w.text == "|":
			out = append(out, cmd)
			cmd, cut = nil, false
		case w.op:
			cut = true
		case !cut:
			cmd = append(cmd, w.text)
		}
	}
	return append(out, cmd)
}

// shellWords splits a line into words, as a POSIX shell does, up to a
// comment.
func shellWords(line string) ([]word, error) {
	var out []word
	var cur strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			out = append(out, word{text: cur.String()})
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			return out, nil
		case c == '|' || c == '>' || c == '<':
			flush()
			out = append(out, word{text: string(c), op: true})
		case c == '\'' || c == '"':
			// No escapes inside quotes: examples need none.
			j := strings.IndexByte(line[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote")
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '\\' && i+1 < len(line):
			cur.WriteByte(line[i+1])
			i++
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return out, nil
}
