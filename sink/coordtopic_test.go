package sink

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestEnsureCoordinationTopicGrows: the coordination topic is created with
// a partition per stream and grown when streams are added; a refused
// growth is an error (the per-topic error of CreatePartitions, which kadm
// does not return by itself), and a topic another member grew first is
// not.
func TestEnsureCoordinationTopicGrows(t *testing.T) {
	c, cfg := newCluster(t)
	adm := newAdmin(t, cfg)
	ctx := testCtx(t)
	partitions := func() int {
		md, err := adm.adm.Metadata(ctx, "coord")
		require.NoError(t, err)
		return len(md.Topics["coord"].Partitions)
	}
	require.NoError(t, adm.EnsureCoordinationTopic(ctx, "coord", 2, 1))
	assert.Equal(t, 2, partitions())
	require.NoError(t, adm.EnsureCoordinationTopic(ctx, "coord", 3, 1))
	assert.Equal(t, 3, partitions())
	require.NoError(t, adm.EnsureCoordinationTopic(ctx, "coord", 2, 1), "a topic with more partitions than streams is kept")
	assert.Equal(t, 3, partitions())

	refuse := func(code int16) {
		c.ControlKey(int16(kmsg.CreatePartitions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			req := kreq.(*kmsg.CreatePartitionsRequest)
			resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
			for _, tp := range req.Topics {
				rt := kmsg.NewCreatePartitionsResponseTopic()
				rt.Topic, rt.ErrorCode = tp.Topic, code
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil, true
		})
	}
	// Another member grew it between this member's metadata and its
	// request: the brokers refuse the growth, and the topic is big enough.
	refuse(kerr.InvalidPartitions.Code)
	require.NoError(t, adm.growCoordinationTopic(ctx, "coord", 2, 3))
	refuse(kerr.InvalidPartitions.Code)
	require.ErrorIs(t, adm.EnsureCoordinationTopic(ctx, "coord", 5, 1), kerr.InvalidPartitions, "still too small")

	refuse(kerr.PolicyViolation.Code)
	err := adm.EnsureCoordinationTopic(ctx, "coord", 4, 1)
	require.ErrorIs(t, err, kerr.PolicyViolation)
	assert.ErrorContains(t, err, `growing coordination topic "coord" from 3 to 4 partitions`)

	refuse(kerr.TopicAuthorizationFailed.Code)
	err = adm.EnsureCoordinationTopic(ctx, "coord", 4, 1)
	require.ErrorIs(t, err, ErrNotAuthorized)
	var ae *AuthorizationError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, ACL{Resource: ResourceTopic, Name: "coord", Operation: OpAlter}, ae.Missing)
}
