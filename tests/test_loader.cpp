// test_loader.cpp: the data loader: worker threads change nothing but when a
// batch is built (same batches, same order, same training), drop_last drops
// each epoch's partial batch, and bad settings are one clear error.
#include <gtest/gtest.h>

#include "anatomy/model/bert/bert.h"
#include "anatomy/data/loader.h"
#include "anatomy/model/checkpoint.h"
#include "anatomy/train/trainer.h"
#include "test_util.h"

namespace anatomy {
namespace {

Dataset data_of(int64_t size) {
  Dataset d = make_dummy_dataset(size, 8, 4);
  for (auto& id : d.input_ids) id %= 300;
  for (int64_t i = 0; i < size; ++i) d.labels_i64[i] = i % 2;
  return d;
}

TEST(Loader, WorkersGiveTheSameBatchesInTheSameOrder) {
  const Dataset data = data_of(23);
  LoaderOptions serial;
  serial.batch_size = 5;
  serial.seed = 9;
  LoaderOptions threaded = serial;
  threaded.num_workers = 3;
  threaded.prefetch_factor = 2;
  BatchLoader a(data, serial), b(data, threaded);
  EXPECT_EQ(a.batches_per_epoch(), 5);
  for (int i = 0; i < 17; ++i) {  // more than three epochs, each with its own shuffle
    const HostBatch x = a.next(), y = b.next();
    ASSERT_EQ(x.batch, y.batch) << "batch " << i;
    EXPECT_EQ(x.input_ids, y.input_ids) << "batch " << i;
    EXPECT_EQ(x.labels_i64, y.labels_i64) << "batch " << i;
    EXPECT_EQ(x.batch, i % 5 == 4 ? 3 : 5) << "the last batch of an epoch holds the rest";
  }
  EXPECT_GE(a.wait_seconds(), 0.0);
}

TEST(Loader, DropLastDropsEachEpochsPartialBatch) {
  const Dataset data = data_of(23);
  LoaderOptions o;
  o.batch_size = 5;
  o.drop_last = true;
  o.num_workers = 2;
  BatchLoader loader(data, o);
  EXPECT_EQ(loader.batches_per_epoch(), 4);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(loader.next().batch, 5);
  o.batch_size = 30;
  EXPECT_THROW(BatchLoader(data, o), Error) << "no full batch at all";
}

TEST(Loader, TrainingWithWorkersIsBitIdentical) {
  auto run = [](int64_t workers, bool drop_last) {
    auto backend = make_cpu_backend(1);
    ModelConfig config = *model_preset("bert-tiny");
    config.vocab_size = 300;
    config.max_position_embeddings = 16;
    BertStyleModel model(*backend, config);
    init_weights(model, 2);
    const Dataset data = data_of(23);
    TrainingArguments args;
    args.per_device_train_batch_size = 5;
    args.num_train_epochs = 2;
    args.dataloader_num_workers = workers;
    args.dataloader_drop_last = drop_last;
    args.progress = false;
    Trainer trainer(*backend, model, data, args);
    return trainer.train();
  };
  const TrainResult serial = run(0, false), threaded = run(2, false);
  EXPECT_EQ(serial.losses, threaded.losses);
  EXPECT_EQ(serial.samples, 46);
  const TrainResult dropped = run(2, true);
  EXPECT_EQ(dropped.losses.size(), 8u);
  EXPECT_EQ(dropped.samples, 40);
}

TEST(Loader, BadFlagsAreOneClearError) {
  auto r = test::run_anatomy("train --device cpu --model bert-tiny --dataloader-prefetch-factor 0 --max-steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--dataloader-prefetch-factor"), std::string::npos) << r.output;
  r = test::run_anatomy("train --device cpu --model bert-tiny --dummy-size 3 --per-device-train-batch-size 4 "
                        "--dataloader-drop-last --max-steps 1 --no-progress");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--dataloader-drop-last"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace anatomy
