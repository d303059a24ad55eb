from flax import nnx


class Encoder(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'hidden', x)
    return x


class Decoder(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'hidden', -x)
    return x
