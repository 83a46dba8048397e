// The in-place editor at the level of one source: what plan -w relies on.
#include "gracekeeper/manifest/edit.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gracekeeper/manifest/document.h"

namespace gracekeeper::manifest {
namespace {

std::string edited(const std::string& text, int index, const char* key, const Json& value) {
  auto documents = read_text(text, "e.yaml");
  EXPECT_TRUE(documents.has_value());
  Document& document = documents->at(static_cast<std::size_t>(index));
  Json updated = document.value;
  updated[key] = value;
  auto edit = edit_document(document, updated);
  EXPECT_FALSE(edit.rewritten);
  return apply_edits(*document.source, edit.edits);
}

// A plain value may go on over several lines: a key added after it goes
// after its last line, not into it.
TEST(Edit, NewKeyAfterAPlainValueOverSeveralLines) {
  EXPECT_EQ(edited("a: one\n  two\n\n  three\n---\nb: 2\n", 0, "c", 3),
            "a: one\n  two\n\n  three\nc: 3\n---\nb: 2\n");
}

// A quote inside a plain scalar (`x"y`) opens nothing: the end of a flow
// collection is found past it (found by the fuzzer: a rewrite stopped short).
TEST(Edit, QuotesInsidePlainScalarsOfFlowCollections) {
  EXPECT_EQ(edited("{a: x\"y, b: {c: 1}}\n---\nc: 2\n", 0, "d", 3),
            "{a: x\"y, b: {c: 1}, \"d\": 3}\n---\nc: 2\n");  // JSON-like: keys quoted
}

// An empty value last in a document: yaml-cpp marks its null at the next
// token, here the next document's `---` (found by the fuzzer: the edit ate it).
TEST(Edit, EmptyValueLastInADocument) {
  EXPECT_EQ(edited("a: 1\nb:\n# note\n---\nc: 2\n", 0, "d", 3),
            "a: 1\nb:\nd: 3\n# note\n---\nc: 2\n");
  EXPECT_EQ(edited("a: 1\nb:\n  null\n---\nc: 2\n", 0, "d", 3),
            "a: 1\nb:\n  null\nd: 3\n---\nc: 2\n");
}

// A tag right before a flow collection (`!{`) ends at the `{` (found by the
// fuzzer: the tag was taken to run on to the next blank).
TEST(Edit, TagRightBeforeAFlowMapping) {
  EXPECT_EQ(edited("!{a: 1, b: [2]}\n", 0, "c", 3), "!{a: 1, b: [2], c: 3}\n");
}

// A key without `:` (an explicit `? key` with no value) last in a document:
// its value has no text, so a key added after it goes after the key, not
// past the end of the source (found by the fuzzer: two keys added there made
// apply_edits throw std::out_of_range).
TEST(Edit, ExplicitKeyWithoutValueLastInADocument) {
  auto documents = read_text(std::string("a: 1\n? z\n"), "e.yaml");
  ASSERT_TRUE(documents.has_value());
  const Document& document = documents->front();
  Json updated = document.value;
  updated["c"] = 3;
  updated["d"] = 4;
  const auto edit = edit_document(document, updated);
  for (const auto& e : edit.edits) EXPECT_LE(e.offset + e.length, document.source->size());
  const std::string text = apply_edits(*document.source, edit.edits);
  auto reread = read_text(text, "e.yaml");
  ASSERT_TRUE(reread.has_value()) << text;
  EXPECT_EQ(reread->front().value, updated) << text;
}

// The same in a flow mapping and before the next key of a block mapping.
TEST(Edit, KeysWithoutValues) {
  EXPECT_EQ(edited("{a: 1, z}\n", 0, "c", 3), "{a: 1, z, \"c\": 3}\n");  // JSON-like
  EXPECT_EQ(edited("? z\nb: 2\n", 0, "c", 3), "? z\nb: 2\nc: 3\n");
  EXPECT_EQ(edited("a: 1\n? z\n", 0, "c", 3), "a: 1\n? z\nc: 3\n");
}

// Edits at positions past the text (a wrong position) never throw: they
// are clamped to the text's end.
TEST(Edit, ApplyEditsClampsPositionsPastTheText) {
  EXPECT_EQ(apply_edits("ab", {{3, 0, "x"}, {3, 0, "y"}}), "abxy");
  EXPECT_EQ(apply_edits("ab", {{1, 5, "x"}, {2, 0, "y"}}), "axy");
  EXPECT_EQ(apply_edits("abc", {{2, 1, "x"}, {1, 0, "y"}}), "abxy");  // out of order
}

// A tag ends where yaml-cpp ends it, at a quote too: `!"b]]"` is the tag `!`
// on the scalar "b]]", whose brackets close nothing (found by the fuzzer: a
// rewrite ended the document at them and left its tail behind).
TEST(Edit, TagRightBeforeAQuotedScalar) {
  EXPECT_EQ(edited("{a: 1, !\"b]]\": {c: 2}}\n---\nc: 2\n", 0, "d", 3),
            "{a: 1, !\"b]]\": {c: 2}, \"d\": 3}\n---\nc: 2\n");
}

// Strict JSON that only the JSON reader reads (a key and its `:` on two
// lines) is written whole, as JSON, not left unchanged (found by the fuzzer:
// plan -w reported a change and wrote none).
TEST(Edit, JsonThatYamlCppCannotParseIsWrittenWhole) {
  const std::string text = "{\"a\"\n  : 1}\n";
  auto documents = read_text(text, "e.json");
  ASSERT_TRUE(documents.has_value());
  Json updated = documents->front().value;
  updated["b"] = 2;
  const auto edit = edit_document(documents->front(), updated);
  EXPECT_TRUE(edit.rewritten);
  EXPECT_EQ(apply_edits(text, edit.edits), "{\n  \"a\": 1,\n  \"b\": 2\n}\n");
}

// A comment at the start of a line inside a flow mapping is a comment: a
// quote in it opens nothing (found by the fuzzer: the rewrite ended early).
TEST(Edit, CommentAtALineStartInsideAFlowMapping) {
  EXPECT_EQ(edited("{a: 1,\n# \"x}\nb: 2}\n---\nc: 2\n", 0, "d", 3),
            "{a: 1,\n# \"x}\nb: 2,\n\"d\": 3}\n---\nc: 2\n");  // one member per line
}

// A `#` right after a `,` (or a quoted scalar, or a bracket) starts a
// comment, blank before it or not; brackets in it open nothing. Inside a
// plain scalar it does not (found by the fuzzer: the rewrite ended one `}`
// early).
TEST(Edit, CommentRightAfterACommaInsideAFlowMapping) {
  EXPECT_EQ(edited("{a: 1,# {x: [\nb: 2}\n---\nc: 2\n", 0, "d", 3),
            "{a: 1,# {x: [\nb: 2,\n\"d\": 3}\n---\nc: 2\n");
  EXPECT_EQ(edited("{\"a\": \"1\"# }\n, \"b\": 2}\n---\nc: 2\n", 0, "d", 3),
            "{\"a\": \"1\"# }\n, \"b\": 2,\n  \"d\": 3}\n---\nc: 2\n");
  EXPECT_EQ(edited("{a: [1]#}\n, b: x#y, c: :#y}\n---\nc: 2\n", 0, "d", 3),
            "{a: [1]#}\n, b: x#y, c: :#y,\n          \"d\": 3}\n---\nc: 2\n");
}

// A `#` right after a flow collection or a quoted scalar is a comment; an
// edit that ends right before it puts a blank there, or the comment would be
// read as part of the plain scalar written before it (found by the fuzzer:
// `maxUnavailable: 0#` read as the string "0#").
TEST(Edit, CommentRightAfterAnEditStaysAComment) {
  EXPECT_EQ(edited("a: {b: 1}#c\n", 0, "d", 3), "a: {b: 1}\nd: 3 #c\n");
  EXPECT_EQ(edited("{a: \"x\"#c\n}\n", 0, "d", 3), "{a: \"x\", \"d\": 3 #c\n}\n");
  EXPECT_EQ(edited("a: \"x\"#c\n", 0, "a", 3), "a: 3 #c\n");
}

// A plain key may go on over two lines (`s,` and ` }` is the key "s, }"),
// here without a value: the document ends after its last line (found by the
// fuzzer: the rewrite left ` }` behind). A key added after it would continue
// it, so the document is written whole.
TEST(Edit, KeyAfterAPlainKeyOverTwoLines) {
  const std::string text = "a: 1\n! s,\n }\n";
  auto documents = read_text(text, "e.yaml");
  ASSERT_TRUE(documents.has_value());
  Json updated = documents->front().value;
  updated["d"] = 3;
  const auto edit = edit_document(documents->front(), updated);
  EXPECT_TRUE(edit.rewritten);
  EXPECT_EQ(apply_edits(text, edit.edits), "a: 1\ns, }: null\nd: 3\n");
}

// A C1 control character, escaped in the source, stays escaped in JSON
// written out: raw, the reader takes it for binary data (found by the fuzzer).
TEST(Edit, JsonWrittenOutKeepsControlCharactersEscaped) {
  const std::string text = "{\"a\": \"\\u008e\\ufffe\",\n\"b\"\n: 1}\n";  // yaml-cpp cannot
  auto documents = read_text(text, "e.json");
  ASSERT_TRUE(documents.has_value());
  Json updated = documents->front().value;
  updated["c"] = 2;
  const auto edit = edit_document(documents->front(), updated);
  ASSERT_TRUE(edit.rewritten);
  const std::string edited = apply_edits(text, edit.edits);
  EXPECT_NE(edited.find("\\u008e\\ufffe"), std::string::npos) << edited;
  auto again = read_text(edited, "e.json");
  ASSERT_TRUE(again.has_value()) << again.error().format();
  EXPECT_EQ(again->front().value, updated);
}

// Several documents of one source edited from one parse, in order.
TEST(Edit, SourceEditorEditsDocumentsInOrder) {
  const std::string text = "a: 1\n---\nb: 2\n---\nc: 3\n";
  auto documents = read_text(text, "e.yaml");
  ASSERT_TRUE(documents.has_value());
  SourceEditor editor((*documents)[0].source);
  std::vector<TextEdit> edits;
  for (int i : {0, 2}) {
    Json updated = (*documents)[static_cast<std::size_t>(i)].value;
    updated["x"] = i;
    auto edit = editor.edit((*documents)[static_cast<std::size_t>(i)], updated);
    edits.insert(edits.end(), edit.edits.begin(), edit.edits.end());
  }
  // A document before the last one edited is reached by parsing again.
  Json one = (*documents)[1].value;
  one["z"] = 1;
  const auto again = editor.edit((*documents)[1], one);
  ASSERT_EQ(again.edits.size(), 1u);
  EXPECT_EQ(again.edits[0].text, "\nz: 1");
  EXPECT_EQ(apply_edits(text, edits), "a: 1\nx: 0\n---\nb: 2\n---\nc: 3\nx: 2\n");
}

// Each item of a List read item by item, given a key `x`, edited whole and
// item by item: the same edits (the List is never decoded whole).
void expect_items_edit_as_whole(const std::string& text) {
  SCOPED_TRACE(text);
  auto whole = read_text(text, "l.yaml");
  ASSERT_TRUE(whole.has_value());
  const Document& list = whole->back();
  Json updated = list.value;
  for (auto& item : updated["items"]) item["x"] = 1;
  const auto expected = edit_document(list, updated);
  ASSERT_FALSE(expected.rewritten);

  SourceEditor editor(list.source);
  ASSERT_TRUE(editor.edits_items(list.index));
  std::vector<TextEdit> edits;
  auto done = for_each_document(
      text, "l.yaml",
      [&](Document&& d) {
        if (!d.item || d.index != list.index) return true;
        Json item = d.value;
        item["x"] = 1;
        auto edit = editor.edit_item(std::move(d), item);
        EXPECT_FALSE(edit.rewritten);
        edits.insert(edits.end(), edit.edits.begin(), edit.edits.end());
        return true;
      },
      {}, nullptr, ListItems::OneByOne);
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(apply_edits(text, edits), apply_edits(text, expected.edits));
}

TEST(Edit, ListItemsEditedOneByOneAsWhole) {
  expect_items_edit_as_whole(
      "apiVersion: v1\nitems:\n- a: 1\n  b:\n    c: 2\n- {a: 2}\n-   a: 3 # three\n"
      "kind: List\n");
  expect_items_edit_as_whole("apiVersion: v1\nkind: List\nitems:\n  - a: 1\n  - a: 2\n");
  expect_items_edit_as_whole(
      "{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n    {\n      \"a\": 1\n    },\n"
      "    {\"a\": 2}\n  ],\n  \"kind\": \"List\"\n}\n");
  expect_items_edit_as_whole(
      "x: 0\n---\n{\"kind\": \"List\", \"items\": [{\"a\": 1}, {\"a\": 2}]}\n");
}

// An item that cannot be edited in place is written whole in its place, at
// its indentation; an anchor or alias in a List keeps it from being edited
// item by item (an item may share text with another).
TEST(Edit, ListItemsWrittenWholeOrNotOneByOne) {
  const std::string text = "kind: List\nitems:\n- a: 1\n  b: 2\n- c: 3\n";
  auto documents = read_text(text, "l.yaml");
  ASSERT_TRUE(documents.has_value());
  SourceEditor editor(documents->front().source);
  ASSERT_TRUE(editor.edits_items(0));
  Document item{Json{{"a", 1}, {"b", 2}}, {}, 0, documents->front().source, 0, false};
  auto edit = editor.edit_item(std::move(item), Json{{"a", 1}, {"d", {{"e", 1}, {"f", 2}}}});
  EXPECT_TRUE(edit.rewritten);  // a key removed
  EXPECT_EQ(apply_edits(text, edit.edits),
            "kind: List\nitems:\n- a: 1\n  d:\n    e: 1\n    f: 2\n- c: 3\n");

  // In a flow sequence, written whole in flow style.
  const std::string flow = "kind: List\nitems: [{a: 1, b: 2}, {c: 3}]\n";
  auto flow_documents = read_text(flow, "l.yaml");
  ASSERT_TRUE(flow_documents.has_value());
  SourceEditor flow_editor(flow_documents->front().source);
  ASSERT_TRUE(flow_editor.edits_items(0));
  Document first{Json{{"a", 1}, {"b", 2}}, {}, 0, flow_documents->front().source, 0, false};
  auto flow_edit = flow_editor.edit_item(std::move(first), Json{{"a", 1}});
  EXPECT_TRUE(flow_edit.rewritten);
  EXPECT_EQ(apply_edits(flow, flow_edit.edits), "kind: List\nitems: [{a: 1}, {c: 3}]\n");

  auto aliased = read_text(std::string("kind: List\nitems:\n- &a {a: 1}\n- *a\n"), "l.yaml");
  ASSERT_TRUE(aliased.has_value());
  SourceEditor no(aliased->front().source);
  EXPECT_FALSE(no.edits_items(0));
  Json updated = aliased->front().value;
  updated["x"] = 1;
  EXPECT_FALSE(no.edit(aliased->front(), updated).edits.empty());  // edited whole instead
}

}  // namespace
}  // namespace gracekeeper::manifest
