#include "base/result.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace tessera {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return Error{"value must be positive, got " + std::to_string(v)};
  return v;
}

TEST(Result, CarriesValueOrError) {
  auto good = ParsePositive(3);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 3);
  auto bad = ParsePositive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "value must be positive, got -1");
  EXPECT_EQ(bad.error().Wrap("limit").message, "limit: value must be positive, got -1");
}

TEST(Status, DefaultsToOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  Status e = Error{"boom"};
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.error().message, "boom");
}

// An error type of a module's own, as kube::ApiError is.
struct CodedError {
  int code = 0;
  std::string message;
  CodedError Wrap(const std::string& context) const { return CodedError{code, context + ": " + message}; }
};

TEST(Result, CarriesAnErrorTypeOfItsOwn) {
  Result<std::string, CodedError> r = CodedError{404, "not found"};
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, 404);
  BasicStatus<CodedError> s = CodedError{409, "conflict"};
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, 409);
  EXPECT_TRUE(BasicStatus<CodedError>::Ok().ok());
}

TEST(Result, HoldsMoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> taken = std::move(r).value();
  EXPECT_EQ(*taken, 7);
}

Status Check(int v) {
  if (v < 0) return Error{"negative"};
  return Status::Ok();
}

Result<int> Doubled(int v) {
  TESSERA_ASSIGN_OR_RETURN(int positive, ParsePositive(v));
  return positive * 2;
}

Result<int> SumOfDoubled(int a, int b) {
  TESSERA_ASSIGN_OR_RETURN(const int x, Doubled(a));
  int y = 0;
  TESSERA_ASSIGN_OR_RETURN_WRAP(y, Doubled(b), "second operand");
  return x + y;
}

Status CheckBoth(int a, int b) {
  TESSERA_RETURN_IF_ERROR(Check(a));
  TESSERA_RETURN_IF_ERROR_WRAP(Check(b), "b = " + std::to_string(b));
  return Status::Ok();
}

// A Result's error propagates into a status of the same error type.
Status CheckParsed(int v) {
  TESSERA_RETURN_IF_ERROR(ParsePositive(v));
  return Status::Ok();
}

TEST(Macros, AssignOrReturnPassesValuesOnAndErrorsUp) {
  auto sum = SumOfDoubled(2, 3);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 10);
  auto first = SumOfDoubled(-1, 3);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.error().message, "value must be positive, got -1");
  auto second = SumOfDoubled(2, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().message, "second operand: value must be positive, got 0");
}

TEST(Macros, ReturnIfErrorStopsAtTheFirstFailure) {
  EXPECT_TRUE(CheckBoth(1, 2).ok());
  EXPECT_EQ(CheckBoth(-1, -2).error().message, "negative");
  EXPECT_EQ(CheckBoth(1, -2).error().message, "b = -2: negative");
  EXPECT_TRUE(CheckParsed(4).ok());
  EXPECT_EQ(CheckParsed(0).error().message, "value must be positive, got 0");
}

BasicStatus<CodedError> Fetch(bool fail) {
  if (fail) return CodedError{503, "unavailable"};
  return BasicStatus<CodedError>::Ok();
}

Result<int, CodedError> FetchAndCount(bool fail) {
  TESSERA_RETURN_IF_ERROR_WRAP(Fetch(fail), "fetch");
  return 1;
}

TEST(Macros, KeepTheErrorTypeAndItsFields) {
  EXPECT_EQ(*FetchAndCount(false), 1);
  auto failed = FetchAndCount(true);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, 503);
  EXPECT_EQ(failed.error().message, "fetch: unavailable");
}

TEST(Macros, TheContextIsBuiltOnlyOnFailure) {
  int built = 0;
  auto context = [&] {
    ++built;
    return std::string("context");
  };
  auto run = [&](int v) -> Status {
    TESSERA_RETURN_IF_ERROR_WRAP(Check(v), context());
    return Status::Ok();
  };
  EXPECT_TRUE(run(1).ok());
  EXPECT_EQ(built, 0);
  EXPECT_FALSE(run(-1).ok());
  EXPECT_EQ(built, 1);
}

}  // namespace
}  // namespace tessera
