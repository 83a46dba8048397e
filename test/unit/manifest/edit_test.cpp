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
  // A document before the last one edited gets no edits.
  EXPECT_TRUE(editor.edit((*documents)[1], Json::object()).edits.empty());
  EXPECT_EQ(apply_edits(text, edits), "a: 1\nx: 0\n---\nb: 2\n---\nc: 3\nx: 2\n");
}

}  // namespace
}  // namespace gracekeeper::manifest
