import Foundation
import Persistence

/// The schemas the conformance checks use: three entities with every attribute type, optional
/// and required attributes, defaults, a to-one/to-many pair and a many-to-many pair.
///
/// - `Owner`: `name` (string, required), `rank` (integer, default 0); `items`, to-many to
///   `Item.owner`.
/// - `Item`: `text`, `number`, `amount`, `flag`, `when`, `blob`, `key` (one optional attribute
///   of each type), `title` (string, required, default `"untitled"`), `legacy` (string,
///   optional; removed in version 2); `owner`, to-one to `Owner.items`; `labels`, to-many to
///   `Label.items`.
/// - `Label`: `name` (string, required); `items`, to-many to `Item.labels`.
public enum ConformanceSchema {
    /// Version 1.
    public static let v1: Schema = try! Schema(version: 1, entities: [owner(), item(version: 1), label()])

    /// Version 2: `Item` gains `note` (optional string) and `priority` (integer, default 7) and
    /// loses `legacy`; a new entity `Tag` (`name`, optional string).
    public static let v2: Schema = try! Schema(
        version: 2,
        entities: [
            owner(), item(version: 2), label(),
            EntityDescription("Tag", attributes: [AttributeDescription("name", .string, isOptional: true)]),
        ]
    )

    /// Version 1 again, but with other entities (no `Label`, and no relationship to it): what
    /// another app's store of the same version would have.
    public static let v1Other: Schema = try! Schema(
        version: 1,
        entities: [
            owner(),
            EntityDescription(
                "Item",
                attributes: [AttributeDescription("text", .string, isOptional: true)],
                relationships: [RelationshipDescription("owner", to: "Owner", inverse: "items")]
            ),
        ]
    )

    /// Version 3: `Item.number` becomes a string, a change no lightweight migration can make.
    public static let v3ChangedType: Schema = {
        var changed = item(version: 2)
        changed.attributes = changed.attributes.map {
            $0.name == "number" ? AttributeDescription("number", .string, isOptional: true) : $0
        }
        return try! Schema(version: 3, entities: [owner(), changed, label()])
    }()

    /// The `Item` attributes and their types (version 1).
    public static let itemAttributes: [(name: String, type: AttributeType)] = item(version: 1).attributes.map {
        ($0.name, $0.type)
    }

    private static func owner() -> EntityDescription {
        EntityDescription(
            "Owner",
            attributes: [
                AttributeDescription("name", .string), AttributeDescription("rank", .integer, defaultValue: 0),
            ],
            relationships: [RelationshipDescription("items", to: "Item", inverse: "owner", isToMany: true)]
        )
    }

    private static func item(version: Int) -> EntityDescription {
        var attributes = [
            AttributeDescription("text", .string, isOptional: true),
            AttributeDescription("number", .integer, isOptional: true),
            AttributeDescription("amount", .double, isOptional: true),
            AttributeDescription("flag", .boolean, isOptional: true),
            AttributeDescription("when", .date, isOptional: true),
            AttributeDescription("blob", .data, isOptional: true),
            AttributeDescription("key", .uuid, isOptional: true),
            AttributeDescription("title", .string, defaultValue: "untitled"),
        ]
        if version == 1 {
            attributes.append(AttributeDescription("legacy", .string, isOptional: true))
        } else {
            attributes.append(AttributeDescription("note", .string, isOptional: true))
            attributes.append(AttributeDescription("priority", .integer, defaultValue: 7))
        }
        return EntityDescription(
            "Item",
            attributes: attributes,
            relationships: [
                RelationshipDescription("owner", to: "Owner", inverse: "items"),
                RelationshipDescription("labels", to: "Label", inverse: "items", isToMany: true),
            ]
        )
    }

    private static func label() -> EntityDescription {
        EntityDescription(
            "Label",
            attributes: [AttributeDescription("name", .string)],
            relationships: [RelationshipDescription("items", to: "Item", inverse: "labels", isToMany: true)]
        )
    }

    /// The entity names of version 1.
    public static let entityNames = ["Owner", "Item", "Label"]
}
