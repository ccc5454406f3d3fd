package bus

// KeyTag is the Redis Cluster hash tag that every Redis key kept for topic
// must carry, so that the keys, the scripts that touch them and the shard
// channel that carries the topic's messages all live in one slot. It is
// the name of the topic's partition channel ("{rt:p7}"): braces included,
// so it is used as a key prefix, e.g. KeyTag("rt:", "room:1", 16)+"h:room:1".
//
// partitions is the sharded bus's Partitions (0: the default, 16). Every
// instance of a fleet must use the same prefix and partitions, as for the
// bus itself. The single-channel bus has no partitions; its instances use
// the same tags so their keys spread evenly over a cluster's slots too.
func KeyTag(prefix, topic string, partitions int) string {
	return PartitionChannel(prefix, Partition(topic, orDefault(partitions, DefaultPartitions)))
}
