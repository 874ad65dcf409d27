import Foundation
import Persistence

/// One `Kitchen` (the app's settings). Each device creates one on its first launch, before it
/// has seen the others; after every import the framework keeps one, the same on every device.
///
/// The winner is a pure function of data every device sees: the earliest `created`, then the
/// smallest id (``UniquenessPolicy``'s rule). Never use "this device's" or "the newest
/// arrival": two devices would each keep their own.
///
/// ``merge(_:into:in:)`` says what a loser gives the winner before it is deleted: here, nothing
/// the winner already has; a loser's non-default `units` survive when the winner has the
/// default. It must be deterministic too (it sees the losers in the same order everywhere).
public struct KitchenSingleton: UniquenessPolicy {
    /// `"Kitchen"`.
    public let entityName = "Kitchen"
    /// One record of the entity.
    public let uniqueness = Uniqueness.singleton
    /// The earliest `created` wins, then the smallest id.
    public let creationStampAttribute: String? = "created"

    /// The singleton policy for the kitchen.
    public init() {}

    /// Keeps a loser's units when the winner has the default ones.
    public func merge(_ loser: Record, into winner: inout Record, in context: ObjectContext) throws {
        if winner["units"] == "metric", loser["units"] != "metric", loser["units"] != .null {
            winner["units"] = loser["units"]
        }
    }
}
