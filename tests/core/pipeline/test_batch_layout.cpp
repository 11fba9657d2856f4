#include "core/pipeline/batch_layout.h"

#include <gtest/gtest.h>

namespace batchcheck {
namespace {

using Shape = std::vector<int64_t>;
using Rows = std::vector<uint64_t>;

TEST(BatchLayout, AFieldsBatchDimensionIsItsFirstOfTheBatchsSizeElseItsOnlyOne) {
  EXPECT_EQ(batch_dim({32, 40}, 32), 0u);
  EXPECT_EQ(batch_dim({21, 32}, 32), 1u);  // pad_sequence's [T, B]
  EXPECT_EQ(batch_dim({32, 32}, 32), 0u);  // batch-first, as default_collate stacks
  EXPECT_FALSE(batch_dim({3, 5, 5}, 5));   // two dimensions of the batch's size
  EXPECT_FALSE(batch_dim({}, 4));
  EXPECT_FALSE(batch_dim({4, 7}, 0));
}

TEST(BatchLayout, RowsUnravelAFlatPositionAlongTheBatchsDimension) {
  const BatchLayout first{{32, 40}, 0};
  EXPECT_EQ(first.row_of(77), 1u);  // 77 / 40
  EXPECT_EQ(rows_of(first, {0, 39, 40, 1279}), (Rows{0, 1, 31}));
  // [T, B]: a token of sample 13 at step 5 lies at 5 * 32 + 13.
  const BatchLayout seq{{21, 32}, 1};
  EXPECT_EQ(rows_of(seq, {5 * 32 + 13, 20 * 32 + 13, 31}), (Rows{13, 31}));
  const BatchLayout seq3{{21, 32, 8}, 1};
  EXPECT_EQ(seq3.row_of((5 * 32 + 13) * 8 + 7), 13u);
}

TEST(BatchLayout, AFlatTensorMayBeAFieldWholeTransposedOrShiftedAlongItsSteps) {
  // labels [4, 7] flattened to [28]: the field as it is, or transposed first.
  auto v = field_views(28, 4, {{4, 7}});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].layout.shape, (Shape{4, 7}));
  EXPECT_EQ(v[0].layout.dim, 0u);
  EXPECT_EQ(rows_of(v[0].layout, {15, 16}), (Rows{2}));
  EXPECT_TRUE(v[1].transposed);
  EXPECT_EQ(v[1].layout.shape, (Shape{7, 4}));
  EXPECT_EQ(rows_of(v[1].layout, {15}), (Rows{3}));
  // The translation example's tgt[1:, :] of a [T, B] = [7, 4] target, flattened: 6 steps from offset 1.
  v = field_views(24, 4, {{7, 4}});
  ASSERT_EQ(v.size(), 4u);  // offsets 0 and 1, each as it is or transposed
  EXPECT_EQ(v[2].offset, 1);
  EXPECT_EQ(v[2].length, 6);
  EXPECT_EQ(v[2].layout.shape, (Shape{6, 4}));
  EXPECT_EQ(v[2].layout.dim, 1u);
  // A field of more dimensions: only as it is; a field with no batch dimension: none.
  v = field_views(60, 5, {{5, 3, 4}, {60}});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].field, 0u);
}

TEST(BatchLayout, NoViewWhereNothingCanHoldTheTensor) {
  EXPECT_TRUE(field_views(28, 4, {}).empty());
  EXPECT_TRUE(field_views(30, 4, {{4, 7}}).empty());       // not a whole number of steps per sample
  EXPECT_TRUE(field_views(8, 4, {{4, 7}}).empty());        // shifted by 5: not looked for
  EXPECT_TRUE(field_views(28, 4, {{3, 5, 5}}).empty());    // no batch dimension known
  EXPECT_TRUE(field_views(0, 4, {{4, 7}}).empty());
}

}  // namespace
}  // namespace batchcheck
