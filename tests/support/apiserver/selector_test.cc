#include "apiserver/selector.h"

#include <gtest/gtest.h>

namespace tessera::testing {
namespace {

using Json = nlohmann::json;

bool Match(const std::string& selector, const Json& labels) {
  auto s = LabelSelector::Parse(selector);
  EXPECT_TRUE(s.ok()) << selector << ": " << (s.ok() ? "" : s.error().message);
  return s.ok() && s->Matches(labels);
}

TEST(LabelSelectorTest, EqualityAndInequality) {
  const Json labels = {{"app", "web"}, {"tier", "front"}};
  EXPECT_TRUE(Match("app=web", labels));
  EXPECT_TRUE(Match("app==web", labels));
  EXPECT_FALSE(Match("app=db", labels));
  EXPECT_TRUE(Match("app!=db", labels));
  EXPECT_FALSE(Match("app!=web", labels));
  EXPECT_TRUE(Match("missing!=x", labels));  // absent key satisfies !=
  EXPECT_TRUE(Match("app=web,tier=front", labels));
  EXPECT_FALSE(Match("app=web,tier=back", labels));
  EXPECT_TRUE(Match(" app = web ", labels));
}

TEST(LabelSelectorTest, ExistenceAndSets) {
  const Json labels = {{"app", "web"}, {"example.com/gpu", "a100"}};
  EXPECT_TRUE(Match("app", labels));
  EXPECT_FALSE(Match("!app", labels));
  EXPECT_TRUE(Match("!db", labels));
  EXPECT_TRUE(Match("app in (web, db)", labels));
  EXPECT_FALSE(Match("app in (db)", labels));
  EXPECT_TRUE(Match("app notin (db,cache)", labels));
  EXPECT_FALSE(Match("app notin (web)", labels));
  EXPECT_TRUE(Match("missing notin (web)", labels));
  EXPECT_TRUE(Match("example.com/gpu in (a100,h100),app", labels));
  EXPECT_TRUE(Match("", labels));
  EXPECT_TRUE(Match("app", Json({{"app", ""}})));
  EXPECT_FALSE(Match("app", Json()));
}

TEST(LabelSelectorTest, RejectsMalformedSelectors) {
  for (const char* bad :
       {"app in (web", "app in ()", "a=b,,c=d", "=web", "app=we b", "app in (x,(y))", "a)"}) {
    EXPECT_FALSE(LabelSelector::Parse(bad).ok()) << bad;
  }
}

TEST(FieldSelectorTest, MatchesDottedPaths) {
  const Json pod = {{"metadata", {{"name", "p"}, {"namespace", "ns"}}},
                    {"spec", {{"nodeName", "node-1"}}},
                    {"status", {{"phase", "Running"}}}};
  auto s = FieldSelector::Parse("spec.nodeName=node-1,status.phase!=Succeeded");
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->Matches(pod));
  EXPECT_FALSE(FieldSelector::Parse("spec.nodeName==node-2")->Matches(pod));
  // An absent field is "" — how schedulers select unbound pods.
  EXPECT_TRUE(FieldSelector::Parse("spec.nodeName=")->Matches(Json({{"spec", Json::object()}})));
  EXPECT_FALSE(FieldSelector::Parse("spec.nodeName=")->Matches(pod));
  EXPECT_FALSE(FieldSelector::Parse("spec.nodeName").ok());
}

}  // namespace
}  // namespace tessera::testing
