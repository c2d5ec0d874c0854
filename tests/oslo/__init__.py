"""oslo.messaging (AMQP 1.0 driver ``amqp1``, oslo.messaging 14.9.3) through a four-node mesh."""
