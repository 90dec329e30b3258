//! openraft's network over the peer protocol: one connection per target (redialled after any
//! error), each RPC one `RaftRpc` request and one `RaftReply` answer. The bodies are
//! serde_json of openraft's own request and result types.

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::{Deserialize, Serialize};

use crate::cluster::peer::{PeerConn, PeerError};
use crate::cluster::store::{RaftNodeId, TypeConfig};
use crate::cluster::wire::{Hello, Message};

/// An openraft RPC as it travels in `Message::RaftRpc`.
#[derive(Serialize, Deserialize, Debug)]
pub enum RaftRequest {
    /// RequestVote.
    Vote(VoteRequest<RaftNodeId>),
    /// AppendEntries (and heartbeats).
    Append(AppendEntriesRequest<TypeConfig>),
    /// One chunk of a snapshot.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
}

/// Runs a received RPC against the local raft and encodes its result for `RaftReply`.
pub async fn serve_rpc(raft: &Raft<TypeConfig>, body: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    match serde_json::from_slice::<RaftRequest>(body)? {
        RaftRequest::Vote(r) => serde_json::to_vec(&raft.vote(r).await),
        RaftRequest::Append(r) => serde_json::to_vec(&raft.append_entries(r).await),
        RaftRequest::Snapshot(r) => serde_json::to_vec(&raft.install_snapshot(r).await),
    }
}

/// Makes one `RaftClient` per target.
#[derive(Clone, Debug)]
pub struct RaftNet {
    /// Our handshake.
    pub hello: Hello,
}

impl RaftNetworkFactory<TypeConfig> for RaftNet {
    type Network = RaftClient;

    async fn new_client(&mut self, target: RaftNodeId, node: &BasicNode) -> RaftClient {
        RaftClient { target, addr: node.addr.clone(), hello: self.hello.clone(), conn: None }
    }
}

/// The connection to one raft peer.
#[derive(Debug)]
pub struct RaftClient {
    target: RaftNodeId,
    addr: String,
    hello: Hello,
    conn: Option<PeerConn>,
}

type RpcResult<T, E> = Result<T, RPCError<RaftNodeId, BasicNode, RaftError<RaftNodeId, E>>>;

impl RaftClient {
    async fn call<T, E>(&mut self, request: &RaftRequest) -> RpcResult<T, E>
    where
        T: for<'de> Deserialize<'de>,
        E: std::error::Error + for<'de> Deserialize<'de>,
    {
        let body =
            serde_json::to_vec(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let answer = self.exchange(Message::RaftRpc(body)).await.map_err(|e| {
            self.conn = None;
            if e.is_unreachable() {
                RPCError::Unreachable(Unreachable::new(&e))
            } else {
                RPCError::Network(NetworkError::new(&e))
            }
        })?;
        let Message::RaftReply(reply) = answer else {
            self.conn = None;
            let e = PeerError::Unexpected {
                addr: self.addr.clone(),
                sent: "raft-rpc",
                got: answer.kind(),
            };
            return Err(RPCError::Network(NetworkError::new(&e)));
        };
        let result: Result<T, RaftError<RaftNodeId, E>> =
            serde_json::from_slice(&reply).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// One request on the kept connection; a kept connection the peer closed meanwhile (it
    /// closes idle ones, or restarted) is redialled once, which is safe because raft RPCs may
    /// be repeated.
    async fn exchange(&mut self, message: Message) -> Result<Message, PeerError> {
        if let Some(mut conn) = self.conn.take() {
            match conn.request(&message).await {
                Ok(answer) => {
                    self.conn = Some(conn);
                    return Ok(answer);
                }
                Err(PeerError::Closed { .. } | PeerError::Io { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let mut conn = PeerConn::dial(&self.addr, &self.hello).await?;
        let answer = conn.request(&message).await?;
        self.conn = Some(conn);
        Ok(answer)
    }
}

impl RaftNetwork<TypeConfig> for RaftClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<RaftNodeId>, openraft::error::Infallible> {
        self.call(&RaftRequest::Append(rpc)).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<RaftNodeId>, InstallSnapshotError> {
        self.call(&RaftRequest::Snapshot(rpc)).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<RaftNodeId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<RaftNodeId>, openraft::error::Infallible> {
        self.call(&RaftRequest::Vote(rpc)).await
    }
}
