#pragma once
// Every layer and loss (one include for the builder, the examples and the tests).
#include "layers/activation.h"
#include "layers/conv2d.h"
#include "layers/dropout.h"
#include "layers/embedding.h"
#include "layers/layer.h"
#include "layers/layernorm.h"
#include "layers/linear.h"
#include "layers/losses.h"
#include "layers/pool.h"
#include "layers/reshape.h"
#include "layers/residual.h"
