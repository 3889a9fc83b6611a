/* train.h - the trainer's public API; grows with the trainer. */
#ifndef INGOT_TRAIN_H
#define INGOT_TRAIN_H

#endif /* INGOT_TRAIN_H */
