package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/floodgate-go/floodgate/policyfile"
)

// The top README and the docs/ pages as a whole: the README is a guide of
// at most 500 lines that links every page; every relative link of theirs
// reaches a file, and a heading of it when it names one; every go block
// parses and every yaml block loads as a policy file. The code the pages
// show is compiled and run where it lives (TestReadmeHasSections and the
// readme tests of interceptor, tiers, concurrency and connectmw); this
// keeps every other block honest too.

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// maxReadmeLines is the most lines README.md may have: a guide, with the
// reference in docs/.
const maxReadmeLines = 500

// docPages returns README.md and every docs/*.md, relative to the root.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md pages")
	}
	out := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

func readPage(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fence is a fenced code block of a page: its info string (the language),
// its text and the line of its opening fence.
type fence struct {
	lang, text string
	line       int
}

// splitPage returns a page's prose, with every fenced block's lines blanked
// (so line numbers still match), and its fenced blocks.
func splitPage(md string) (prose string, fences []fence) {
	var b strings.Builder
	var cur *fence
	for i, line := range strings.Split(md, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		if rest, ok := strings.CutPrefix(line, "```"); ok {
			if cur == nil {
				cur = &fence{lang: strings.TrimSpace(rest), line: i + 1}
			} else {
				fences = append(fences, *cur)
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.text += line + "\n"
			continue
		}
		b.WriteString(line)
	}
	if cur != nil { // unclosed: report it as a block the checks fail
		cur.lang = "unclosed " + cur.lang
		fences = append(fences, *cur)
	}
	return b.String(), fences
}

// slug is GitHub's anchor for a heading: lower case, every character but
// letters, digits, '_', '-' and spaces dropped, spaces made hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var headingRE = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)

// anchors returns the anchors of a page's headings, a repeated one with
// GitHub's -1, -2, ... suffixes.
func anchors(md string) map[string]bool {
	prose, _ := splitPage(md)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(prose, -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// linkRE matches a markdown link's or image's target: ](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestReadmeIsAGuide: README.md has at most maxReadmeLines lines and
// links every docs/ page.
func TestReadmeIsAGuide(t *testing.T) {
	readme := readPage(t, "README.md")
	if n := strings.Count(readme, "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move reference material to a docs/ page", n, maxReadmeLines)
	}
	prose, _ := splitPage(readme)
	for _, page := range docPages(t)[1:] {
		if !strings.Contains(prose, "]("+page+")") && !strings.Contains(prose, "]("+page+"#") {
			t.Errorf("README.md does not link %s", page)
		}
	}
}

// TestDocsLinks: every relative link of README.md and docs/*.md points at
// a file or directory that exists, and a link with an anchor into a
// markdown file at one of its headings.
func TestDocsLinks(t *testing.T) {
	anchorsOf := map[string]map[string]bool{}
	var checked int
	for _, page := range docPages(t) {
		prose, _ := splitPage(readPage(t, page))
		for _, m := range linkRE.FindAllStringSubmatchIndex(prose, -1) {
			target := prose[m[2]:m[3]]
			line := strings.Count(prose[:m[0]], "\n") + 1
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			resolved := page // an anchor alone: this page
			if file != "" {
				resolved = path.Join(path.Dir(page), file)
				if strings.HasPrefix(resolved, "../") || path.IsAbs(file) {
					t.Errorf("%s:%d: link %q leaves the repository", page, line, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(resolved))); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", page, line, target, resolved)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			if anchorsOf[resolved] == nil {
				anchorsOf[resolved] = anchors(readPage(t, resolved))
			}
			if !anchorsOf[resolved][anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", page, line, target, resolved, anchor)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative links found: is linkRE broken?")
	}
}

// TestDocsGoBlocks: every go block of README.md and docs/*.md parses, as
// a whole file, as declarations of a file or, failing that, as the
// statements of a function body.
func TestDocsGoBlocks(t *testing.T) {
	var n int
	for _, page := range docPages(t) {
		_, fences := splitPage(readPage(t, page))
		for _, f := range fences {
			if f.lang != "go" {
				if strings.HasPrefix(f.lang, "unclosed") {
					t.Errorf("%s:%d: a code block is never closed", page, f.line)
				}
				continue
			}
			n++
			fset := token.NewFileSet()
			if _, err := parser.ParseFile(fset, "", f.text, parser.AllErrors); err == nil {
				continue // a whole file
			}
			_, declErr := parser.ParseFile(fset, "", "package p\n"+f.text, parser.AllErrors)
			if declErr == nil {
				continue
			}
			_, stmtErr := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+f.text+"}\n", parser.AllErrors)
			if stmtErr == nil {
				continue
			}
			t.Errorf("%s:%d: the go block parses neither as declarations nor as statements:\n%v\n%v\n%s",
				page, f.line, declErr, stmtErr, f.text)
		}
	}
	if n == 0 {
		t.Error("no go blocks found: is splitPage broken?")
	}
}

// TestDocsPolicies: every yaml block of README.md and docs/*.md loads with
// policyfile.Load, the loader of the whole policy file; a block that is
// one section (concurrency:) loads with an empty rules: beside it.
func TestDocsPolicies(t *testing.T) {
	var n int
	for _, page := range docPages(t) {
		_, fences := splitPage(readPage(t, page))
		for _, f := range fences {
			if f.lang != "yaml" {
				continue
			}
			n++
			y := f.text
			if !slices.ContainsFunc(strings.Split(y, "\n"), func(l string) bool { return strings.HasPrefix(l, "rules:") }) {
				y = "rules: []\n" + y
			}
			if _, err := policyfile.Load([]byte(y)); err != nil {
				t.Errorf("%s:%d: the yaml block does not load as a policy: %v\n%s", page, f.line, err, f.text)
			}
		}
	}
	if n == 0 {
		t.Error("no yaml blocks found: is splitPage broken?")
	}
}
