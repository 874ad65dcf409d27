import Foundation
import Persistence

/// One `Category` per name, ignoring case and surrounding spaces: two devices that each create
/// "Soups" (or one "soups ") end with one category holding both devices' recipes.
///
/// A `.custom` key is a pure function of the record's values (never of the device or the
/// clock), so every device groups the same records. The winner is the earliest `created`, then
/// the smallest id; the losers' recipes move to it (to-many relationships are united) and the
/// losers are deleted, on every device alike.
public struct CategoryByName: UniquenessPolicy {
    /// `"Category"`.
    public let entityName = "Category"
    /// The name, trimmed and lowercased.
    public let uniqueness = Uniqueness.custom { record in
        guard case .string(let name) = record["name"] else { return nil }
        return [.string(name.trimmingCharacters(in: .whitespaces).lowercased())]
    }
    /// The earliest `created` wins, then the smallest id.
    public let creationStampAttribute: String? = "created"

    /// The duplicate policy for categories.
    public init() {}
}
