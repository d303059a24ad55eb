from flax import nnx


class Encoder(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): multi-instance: one name sown by several module instances; flat names would merge (sown at Decoder, Encoder)
    self.sow(nnx.Intermediate, 'hidden', x)
    return x


class Decoder(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): multi-instance: one name sown by several module instances; flat names would merge (sown at Decoder, Encoder)
    self.sow(nnx.Intermediate, 'hidden', -x)
    return x
