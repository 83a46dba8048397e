// The pure parts of the event recorder: dedupe key, series state, JSON.
// (Leader election's tests are in leader_election_test.cpp.)
#include "gracekeeper/kube/events.h"

#include <gtest/gtest.h>

namespace gracekeeper::kube {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::system_clock;
using Kind = EventSeriesCache::Write::Kind;

EventRecord warning(std::string note = "drain-seconds: \"x\" is not a number") {
  EventRecord e;
  e.regarding = {"apps/v1", "Deployment", "shop", "web", "uid-1"};
  e.type = EventType::Warning;
  e.reason = "InvalidAnnotation";
  e.action = "Tune";
  e.note = std::move(note);
  return e;
}

const Clock::time_point t0 = Clock::time_point(1'800'000'000s);

TEST(DedupeKey, SameEventSameKey) {
  EXPECT_EQ(dedupe_key(warning()), dedupe_key(warning()));
}

TEST(DedupeKey, EachFieldCounts) {
  const auto base = dedupe_key(warning());
  auto e = warning();
  e.note = "other";
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.type = EventType::Normal;
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.reason = "Other";
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.regarding.uid = "uid-2";
  EXPECT_NE(dedupe_key(e), base);
  e = warning();
  e.regarding.name = "api";
  EXPECT_NE(dedupe_key(e), base);
}

TEST(DedupeKey, FieldBoundariesCannotBeForged) {
  auto a = warning();
  a.reason = "ab";
  a.note = "c";
  auto b = warning();
  b.reason = "a";
  b.note = "bc";
  EXPECT_NE(dedupe_key(a), dedupe_key(b));
}

// A waiting Event is kept as its key alone: the key must give the record back.
TEST(DedupeKey, DecodesBackToTheRecord) {
  auto e = warning("a note: with \"quotes\", 12:34 and a colon");
  e.regarding = {"", "Node", "", "node-1", ""};  // empty fields too
  auto decoded = decode_key(dedupe_key(e));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->regarding, e.regarding);
  EXPECT_EQ(decoded->type, EventType::Warning);
  EXPECT_EQ(decoded->reason, e.reason);
  EXPECT_EQ(decoded->note, e.note);
  EXPECT_EQ(decoded->action, "");  // not part of the key

  EventSeriesCache cache(4, 360s);
  const auto* entry = cache.observe(e, t0, "node-1.1");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->record().action, "Tune");
  EXPECT_EQ(entry->record().note, e.note);
}

TEST(DedupeKey, DecodingRefusesWhatIsNotAKey) {
  const std::string key = dedupe_key(warning());
  EXPECT_FALSE(decode_key(""));
  EXPECT_FALSE(decode_key(key.substr(0, key.size() - 1)));  // cut short
  EXPECT_FALSE(decode_key(key + "x"));                      // trailing bytes
  EXPECT_FALSE(decode_key("7:apps/v1"));                    // too few fields
  EXPECT_FALSE(decode_key("x:" + key));                     // not a length
  EXPECT_FALSE(decode_key("99999999999999999999999:a"));    // a length beyond the key
  auto odd = warning();
  std::string bad = dedupe_key(odd);
  bad.replace(bad.find("7:Warning"), 9, "7:Warnung");  // not a type
  EXPECT_FALSE(decode_key(bad));
}

// Annotations are part of the record: they count in the key, come back
// from it, and are written as the Event object's metadata.annotations.
TEST(DedupeKey, AnnotationsCountAndComeBack) {
  auto e = warning();
  e.annotations = {{"gracekeeper.dev/reports", "00000000000000ff"}, {"a", ""}};
  EXPECT_NE(dedupe_key(e), dedupe_key(warning()));
  const auto decoded = decode_key(dedupe_key(e));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->annotations, e.annotations);
  EXPECT_EQ(decoded->note, e.note);
  const std::string key = dedupe_key(e);
  EXPECT_FALSE(decode_key(key + "1:a"));  // a name without its value
  EXPECT_TRUE(decode_key(dedupe_key(warning()))->annotations.empty());

  EventSeriesCache cache(4, 360s);
  ASSERT_TRUE(cache.observe(e, t0, "web.1"));
  const auto body = event_object(*cache.find(key), 1, "gracekeeper.dev/operator", "pod-a");
  EXPECT_EQ(body["metadata"]["annotations"]["gracekeeper.dev/reports"], "00000000000000ff");
  EXPECT_EQ(body["metadata"]["annotations"]["a"], "");
  const auto plain = dedupe_key(warning());
  ASSERT_TRUE(cache.observe(warning(), t0, "web.2"));
  EXPECT_FALSE(event_object(*cache.find(plain), 1, "c", "i")["metadata"].contains("annotations"));
}

TEST(EventSeriesCache, FirstOccurrenceCreatesWithoutSeries) {
  EventSeriesCache cache(16, 360s);
  ASSERT_TRUE(cache.observe(warning(), t0, "web.1"));
  auto w = cache.next_write(dedupe_key(warning()));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->name, "web.1");
  EXPECT_EQ(w->count, 1);
  auto body = event_object(*cache.find(w->key), w->count, "gracekeeper.dev/operator", "pod-a");
  EXPECT_FALSE(body.contains("series"));
  EXPECT_EQ(body["type"], "Warning");
  EXPECT_EQ(body["reason"], "InvalidAnnotation");
  EXPECT_EQ(body["action"], "Tune");
  EXPECT_EQ(body["reportingController"], "gracekeeper.dev/operator");
  EXPECT_EQ(body["reportingInstance"], "pod-a");
  EXPECT_EQ(body["regarding"]["kind"], "Deployment");
  EXPECT_EQ(body["regarding"]["uid"], "uid-1");
  EXPECT_EQ(body["metadata"]["namespace"], "shop");
  EXPECT_EQ(body["eventTime"], "2027-01-15T08:00:00.000000Z");
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(w->key));
  EXPECT_FALSE(cache.find(w->key)->writing);
}

TEST(EventSeriesCache, RepeatPatchesSeriesStartingAtTwo) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  auto w = cache.next_write(key);
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(key));

  ASSERT_TRUE(cache.observe(warning(), t0 + 10s, "web.2"));
  w = cache.next_write(key);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::PatchSeries);
  EXPECT_EQ(w->name, "web.1");
  EXPECT_EQ(w->count, 2);
  auto patch = series_patch(*cache.find(key), w->count);
  EXPECT_EQ(patch["series"]["count"], 2);
  EXPECT_EQ(patch["series"]["lastObservedTime"], "2027-01-15T08:00:10.000000Z");
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(key));
}

TEST(EventSeriesCache, ObservationsDuringAWriteCoalesce) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  ASSERT_TRUE(cache.observe(warning(), t0, "web.1"));
  auto w = cache.next_write(key);                        // create in flight
  EXPECT_FALSE(cache.observe(warning(), t0 + 1s, "x"));  // no second writer
  EXPECT_FALSE(cache.observe(warning(), t0 + 2s, "y"));
  cache.write_succeeded(*w);
  w = cache.next_write(key);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::PatchSeries);
  EXPECT_EQ(w->count, 3);
  cache.write_succeeded(*w);
  EXPECT_FALSE(cache.next_write(key));
}

TEST(EventSeriesCache, ManyBeforeTheFirstWriteCreateWithSeries) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  EXPECT_TRUE(cache.observe(warning(), t0, "web.1"));
  for (int i = 1; i < 5; ++i) {
    // The writer has not run yet: still only one writer.
    EXPECT_FALSE(cache.observe(warning(), t0 + std::chrono::seconds(i), "x"));
  }
  auto w = cache.next_write(key);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->count, 5);
  auto body = event_object(*cache.find(key), w->count, "c", "i");
  EXPECT_EQ(body["series"]["count"], 5);
  EXPECT_EQ(body["series"]["lastObservedTime"], "2027-01-15T08:00:04.000000Z");
}

TEST(EventSeriesCache, AfterTheWindowANewEventStarts) {
  EventSeriesCache cache(16, 60s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  cache.write_succeeded(*cache.next_write(key));
  EXPECT_FALSE(cache.next_write(key));  // the writer finds nothing left and ends
  ASSERT_TRUE(cache.observe(warning(), t0 + 61s, "web.2"));
  auto w = cache.next_write(key);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->name, "web.2");
  EXPECT_EQ(w->count, 1);
}

TEST(EventSeriesCache, PatchNotFoundRecreates) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  cache.write_succeeded(*cache.next_write(key));
  cache.observe(warning(), t0 + 1s, "x");
  auto w = cache.next_write(key);
  ASSERT_EQ(w->kind, Kind::PatchSeries);
  cache.write_failed(*w, /*not_found=*/true);
  w = cache.next_write(key);
  ASSERT_TRUE(w);
  EXPECT_EQ(w->kind, Kind::Create);
  EXPECT_EQ(w->count, 2);
}

TEST(EventSeriesCache, OtherFailuresDropTheEntry) {
  EventSeriesCache cache(16, 360s);
  const auto key = dedupe_key(warning());
  cache.observe(warning(), t0, "web.1");
  cache.write_failed(*cache.next_write(key), false);
  EXPECT_EQ(cache.find(key), nullptr);
  EXPECT_FALSE(cache.next_write(key));
  EXPECT_TRUE(cache.observe(warning(), t0 + 1s, "web.2"));  // starts over
}

// Writes everything observed for `e` (as a writer would).
void write_all(EventSeriesCache& cache, const EventRecord& e) {
  const auto key = dedupe_key(e);
  while (auto w = cache.next_write(key)) cache.write_succeeded(*w);
}

TEST(EventSeriesCache, LeastRecentlyUsedIsEvicted) {
  EventSeriesCache cache(2, 360s);
  auto a = warning("a"), b = warning("b"), c = warning("c");
  cache.observe(a, t0, "a");
  cache.observe(b, t0, "b");
  write_all(cache, a);
  write_all(cache, b);
  cache.observe(a, t0 + 1s, "a2");  // a is now the most recent
  write_all(cache, a);
  cache.observe(c, t0 + 2s, "c");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.find(dedupe_key(a)), nullptr);
  EXPECT_EQ(cache.find(dedupe_key(b)), nullptr);
  EXPECT_NE(cache.find(dedupe_key(c)), nullptr);
}

// A burst larger than the cache (thousands of Deployments tuned at once,
// writers capped) must not lose the events still waiting to be written.
TEST(EventSeriesCache, EntriesWaitingToBeWrittenAreNotEvicted) {
  EventSeriesCache cache(2, 360s);
  std::vector<EventRecord> burst;
  for (int i = 0; i < 5; ++i) burst.push_back(warning("burst " + std::to_string(i)));
  for (const auto& e : burst) EXPECT_TRUE(cache.observe(e, t0, e.note));
  EXPECT_EQ(cache.size(), 5u);
  for (const auto& e : burst) {
    auto w = cache.next_write(dedupe_key(e));
    ASSERT_TRUE(w) << e.note << " was lost";
    EXPECT_EQ(w->kind, Kind::Create);
    cache.write_succeeded(*w);
    EXPECT_FALSE(cache.next_write(dedupe_key(e)));  // done: now it may be evicted
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(cache.find(dedupe_key(burst[4])), nullptr);
  EXPECT_EQ(cache.find(dedupe_key(burst[0])), nullptr);
}

TEST(HeldEvents, FirstInFirstOutWithEveryField) {
  HeldEvents held;
  const auto since = std::chrono::steady_clock::time_point(5s);
  auto a = warning("note a");
  auto b = warning("note b");
  b.regarding = {"", "Node", "", std::string(300, 'n'), ""};
  b.type = EventType::Normal;
  b.action = "Check";
  b.annotations = {{"gracekeeper.dev/reports", "00000000000000ff,0000000000000001"}, {"e", ""}};
  held.push(a, t0, since);
  held.push(b, t0 + 1s, since + 1s);
  EXPECT_EQ(held.size(), 2u);
  EXPECT_EQ(held.front_since(), since);
  auto first = held.pop();
  EXPECT_EQ(dedupe_key(first.record), dedupe_key(a));
  EXPECT_EQ(first.record.action, "Tune");
  EXPECT_EQ(first.observed, t0);
  EXPECT_EQ(held.front_since(), since + 1s);
  auto second = held.pop();
  EXPECT_EQ(second.record.regarding, b.regarding);
  EXPECT_EQ(second.record.type, EventType::Normal);
  EXPECT_EQ(second.record.note, "note b");
  EXPECT_EQ(second.record.action, "Check");
  EXPECT_EQ(second.record.annotations, b.annotations);  // what the Event says it reports
  EXPECT_TRUE(first.record.annotations.empty());
  EXPECT_EQ(second.observed, t0 + 1s);
  EXPECT_TRUE(held.empty());
}

// A burst: many chunks, each note stored once, and every chunk returned to
// the system once the queue is drained.
TEST(HeldEvents, ABurstIsSmallAndLeavesNothingBehind) {
  HeldEvents held;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto e = warning(i % 2 ? "container proxy: no readiness probe"
                           : "a long Tuned note " + std::string(150, 'x'));
    e.regarding.name = "web-" + std::to_string(i);
    held.push(e, t0, std::chrono::steady_clock::time_point(std::chrono::seconds(i)));
  }
  EXPECT_EQ(held.distinct_notes(), 2u);
  EXPECT_GT(held.chunk_bytes(), HeldEvents::kChunkSize);  // more than one chunk
  EXPECT_LT(held.chunk_bytes() / n, 128u) << "bytes per held Event";
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(held.front_since(), std::chrono::steady_clock::time_point(std::chrono::seconds(i)));
    auto h = held.pop();
    ASSERT_EQ(h.record.regarding.name, "web-" + std::to_string(i));
    ASSERT_EQ(h.record.note.size(), i % 2 ? 35u : 168u);
  }
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(held.chunk_bytes(), 0u);
  EXPECT_EQ(held.distinct_notes(), 0u);
}

TEST(EventObject, ClusterScopedGoesToDefaultAndLongNoteIsCut) {
  EventSeriesCache cache(4, 360s);
  auto e = warning(std::string(2000, 'n'));
  e.regarding = {"v1", "Node", "", "node-1", "u"};
  cache.observe(e, t0, "node-1.1");
  auto body = event_object(*cache.find(dedupe_key(e)), 1, "c", "i");
  EXPECT_EQ(body["metadata"]["namespace"], "default");
  EXPECT_FALSE(body["regarding"].contains("namespace"));
  EXPECT_EQ(body["note"].get<std::string>().size(), 1024u);
}

}  // namespace
}  // namespace gracekeeper::kube
