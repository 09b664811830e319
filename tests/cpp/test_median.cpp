#include <gtest/gtest.h>

#include "common/median.hpp"

using gpustripe::median_of;

TEST(MedianOf, OddCountTakesTheMiddleValue) { EXPECT_DOUBLE_EQ(median_of({9.0, 1.0, 5.0}), 5.0); }

// Two trials, one slow: the report is neither the slow one nor the fast one alone.
TEST(MedianOf, EvenCountTakesTheMeanOfTheMiddleTwo) {
  EXPECT_DOUBLE_EQ(median_of({60.0, 480.0}), 270.0);
  EXPECT_DOUBLE_EQ(median_of({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST(MedianOf, NoValuesGiveZero) { EXPECT_DOUBLE_EQ(median_of({}), 0.0); }
